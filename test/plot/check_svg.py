#!/usr/bin/env python3
"""check_svg.py — `dtrun plot`'s SVG checked two ways.

  check_svg.py svg FILE.svg RUN.jsonl...   structure, with Python's XML parser:
      an <svg> root with width/height, the three panels (loss, throughput,
      memory), each with a frame, tick labels, the x label "step", a y label
      with its unit and a caption saying what it plots (memory: the accounted
      bytes, and the OS peak RSS when the rank files record it); per run a
      train-loss line with as many points as the run's loss records, a
      val-loss line likewise, a throughput line, per rank a memory line (and
      an RSS line) with as many points as its rank file; ranks' markers on
      distinct points, so ranks with equal memory both show; a legend with one
      entry per meaning: each run, train loss, validation loss, each rank (those
      with equal memory saying so), accounted peak, OS peak RSS — no entry
      twice, none with two meanings.
  check_svg.py png SHOT.png N_RUNS N_RANKS a screenshot (PNG decoded here with
      zlib: no imaging library needed): in the loss and throughput panels,
      pixels of every run's colour; in the memory panel, of every rank's.
"""
import json
import struct
import sys
import xml.etree.ElementTree as ET
import zlib

NS = "{http://www.w3.org/2000/svg}"
COLORS = [(0x1f, 0x77, 0xb4), (0xd6, 0x27, 0x28), (0x2c, 0xa0, 0x2c)]
RANK_COLORS = [(0xe6, 0x9f, 0x00), (0x56, 0xb4, 0xe9), (0x00, 0x9e, 0x73), (0xcc, 0x79, 0xa7)]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def rank_files(run):
    stem, files, r = run[:-len(".jsonl")], [], 0
    while True:
        try:
            files.append([json.loads(l) for l in open(f"{stem}.rank{r}.jsonl") if l.strip()])
        except FileNotFoundError:
            return files
        r += 1


def check_svg(path, runs):
    root = ET.parse(path).getroot()
    if root.tag != NS + "svg" or not root.get("width") or not root.get("height"):
        fail("root is not an <svg> with width and height")
    ranks = [rank_files(run) for run in runs]
    n_ranks = max(len(r) for r in ranks)
    has_rss = any("rss_peak" in row for rr in ranks for f in rr for row in f)
    panels = {g.get("id"): g for g in root.iter(NS + "g") if g.get("class") == "panel"}
    for name, title, unit, says in (("loss", "loss", "loss (nats)", ["train", "validation"]),
                                    ("throughput", "throughput", "tokens/s", ["a colour per run"]),
                                    ("memory", "memory per rank", "peak memory per rank (MiB)",
                                     ["accounts for"] + (["RSS"] if has_rss else []))):
        g = panels.get("panel-" + name)
        if g is None:
            fail(f"no {name} panel")
        texts = [t.text for t in g.iter(NS + "text")]
        if title not in texts or "step" not in texts or unit not in texts:
            fail(f"{name} panel: title, 'step' or '{unit}' missing: {texts[:5]}")
        caption = [t.text for t in g.iter(NS + "text") if t.get("class") == "caption"]
        if len(caption) != 1 or not all(w in caption[0] for w in says):
            fail(f"{name} panel: its caption {caption} does not say {says}")
        ticks = [t for t in texts if t and t.replace(".", "").replace("-", "").replace("k", "").replace("M", "").isdigit()]
        if len(ticks) < 6:
            fail(f"{name} panel: {len(ticks)} tick labels")
        if not list(g.iter(NS + "rect")):
            fail(f"{name} panel: no frame")
    lines = {}
    for pl in root.iter(NS + "polyline"):
        lines.setdefault(pl.get("class"), []).append(len(pl.get("points").split()))
    for i, run in enumerate(runs):
        rows = [json.loads(l) for l in open(run)]
        n_loss = sum("loss" in r for r in rows)
        n_val = sum("val_loss" in r for r in rows)
        if lines.get("train-loss", [])[i:i + 1] != [n_loss]:
            fail(f"run {i}: train-loss line {lines.get('train-loss')} for {n_loss} records")
        if lines.get("val-loss", [])[i:i + 1] != [n_val]:
            fail(f"run {i}: val-loss line {lines.get('val-loss')} for {n_val} records")
    if len(lines.get("throughput", [])) != len(runs):
        fail(f"throughput lines: {lines.get('throughput')}")
    want_mem = [len(f) for rr in ranks for f in rr]
    if lines.get("memory") != want_mem:
        fail(f"memory lines {lines.get('memory')}, want one per rank of each run with its records {want_mem}")
    if has_rss and lines.get("rss") != [sum("rss_peak" in row for row in f) for rr in ranks for f in rr]:
        fail(f"RSS lines {lines.get('rss')} for rank files {want_mem}")
    # each rank marks its own points: no two ranks of a run put a marker at the same place
    mem = panels["panel-memory"]
    marks, at = {}, []
    for el in mem:
        if el.tag == NS + "polyline" and el.get("class") == "memory":
            at = marks.setdefault(el.get("data-rank"), [])
        elif el.tag == NS + "g" and el.get("class") == "memory-marks":
            for m in el:
                at.append((m.get("cx") or m.get("x") or m.get("points").split()[0].split(",")[0]))
    if len(marks) != n_ranks or any(not v for v in marks.values()):
        fail(f"memory markers per rank: {{k: len(v) for k, v in marks.items()}} for {n_ranks} ranks")
    seen = {}
    for r, xs in marks.items():
        for x in xs:
            if x in seen and seen[x] != r:
                fail(f"ranks {seen[x]} and {r} put a marker at the same x {x}: equal curves would hide one")
            seen[x] = r
    legend = [t.text for g in root.iter(NS + "g") if g.get("id") == "legend" for t in g.iter(NS + "text")
              if t.get("class") != "key-heading"]
    if len(legend) != len(set(legend)) or any(";" in t for t in legend):
        fail(f"legend entries twice or with two meanings: {legend}")
    want = [run.rsplit("/", 1)[-1][:-len(".jsonl")] for run in runs] + ["train loss", "validation loss",
                                                                           "accounted peak"]
    want += ["OS peak RSS"] if has_rss else []
    for q in range(n_ranks):
        total = [[row["mem_peak"]["total"] for row in rr[q]] for rr in ranks if len(rr) > q]
        equal = [e for e in range(q) if all([row["mem_peak"]["total"] for row in rr[e]] == t
                                            for rr, t in zip([rr for rr in ranks if len(rr) > q], total))]
        want.append(f"rank {q} (equal to rank {equal[0]})" if equal else f"rank {q}")
    missing = [w for w in want if w not in legend]
    extra = [t for t in legend if t not in want]
    if missing or extra:
        fail(f"legend {legend}: missing {missing}, unexpected {extra}")
    print(f"ok: SVG structure: 3 panels with ticks, units and captions, {sum(map(len, lines.values()))} lines, "
          f"{n_ranks} ranks marking distinct points, legend {legend}")


def read_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("not a PNG")
    at, idat, w = 8, b"", 0
    while at < len(data):
        n, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                fail(f"PNG kind not handled: depth {depth} colour type {ctype} interlace {interlace}")
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        at += 12 + n
    raw, stride = zlib.decompress(idat), w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1: line[x] = (line[x] + a) & 255
            elif f == 2: line[x] = (line[x] + b) & 255
            elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows


def check_png(path, n_runs, n_ranks):
    w, h, bpp, rows = read_png(path)
    panel_w = w / 3
    counts = [[0] * n_runs for _ in range(2)]
    rank_counts = [0] * n_ranks
    for y in range(min(h, 380)):  # the panels (MARGIN_T 60 + 300 high), not the legend's keys below
        row = rows[y]
        for x in range(w):
            px = tuple(row[x * bpp:x * bpp + 3])
            p = min(2, int(x / panel_w))
            if p < 2:
                for r in range(n_runs):
                    if all(abs(px[k] - COLORS[r][k]) <= 40 for k in range(3)):
                        counts[p][r] += 1
            else:
                for q in range(n_ranks):
                    if all(abs(px[k] - RANK_COLORS[q][k]) <= 30 for k in range(3)):
                        rank_counts[q] += 1
    print(f"screenshot {w}x{h}: pixels of each run's colour in loss, throughput: {counts}; "
          f"of each rank's colour in memory: {rank_counts}")
    for p, name in enumerate(("loss", "throughput")):
        for r in range(n_runs):
            if counts[p][r] < 50:
                fail(f"the {name} panel shows no curve of run {r} ({counts[p][r]} pixels)")
    for q in range(n_ranks):
        if rank_counts[q] < 50:
            fail(f"the memory panel shows no curve of rank {q} ({rank_counts[q]} pixels)")
    print("ok: the screenshot shows every run's curves, and every rank's memory, equal ones too")


if __name__ == "__main__":
    if sys.argv[1] == "svg":
        check_svg(sys.argv[2], sys.argv[3:])
    else:
        check_png(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
