#!/usr/bin/env python3
"""fortunes-jsonl.py OUT_DIR FILES — every fortune of Debian's `fortunes`
package as one JSONL document ({"text": ...}), split over FILES files
(OUT_DIR/fortunes_00.jsonl ...) so that threads have work: the tokenizer
benchmarks' corpus (~2.8 MB, 15,218 documents)."""
import glob
import json
import os
import sys

out, nfiles = sys.argv[1], int(sys.argv[2])
src = sorted(f for f in glob.glob("/usr/share/games/fortunes/*")
             if os.path.isfile(f) and not f.endswith((".dat", ".u8")))
if not src:
    sys.exit("fortunes-jsonl.py: no /usr/share/games/fortunes (apt-get install fortunes)")
docs = []
for f in src:
    text = open(f, encoding="utf-8").read()
    docs += [d.strip("\n") for d in text.split("\n%\n") if d.strip()]
per = (len(docs) + nfiles - 1) // nfiles
for i in range(nfiles):
    with open(f"{out}/fortunes_{i:02d}.jsonl", "w", encoding="utf-8") as g:
        for d in docs[i * per:(i + 1) * per]:
            g.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
print(f"corpus: {len(docs)} fortunes from {len(src)} files in {nfiles} JSONL files")
