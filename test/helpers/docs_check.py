#!/usr/bin/env python3
"""docs_check.py — the README's, the man pages' and the configs' examples
against the binary (test/integration/docs_drift.sh runs it).

What it checks, each failure one line "FILE:LINE: what":
  1. transcripts: a line "$ dtrun ARGS" in a README code block, a man page's
     .nf/.fi block or a config's comment, followed by its output, is run and
     its output must be the printed one (a line "..." stands for any lines);
  2. commands: every other "dtrun ..." line in those places must be one the
     binary takes: each --flag is in the usage of `dtrun --help` or of
     `dtrun SUBCOMMAND --help`, and a launch of a job file of this tree passes
     the launch's checks (`dtrun --dry-run` with the same flags: the layout
     against --nproc-per-node x --nnodes, the job itself);
  3. man dtrun-job(5) PRESETS: the table has every preset the binary knows,
     each row's numbers those `dtrun --print-config` resolves;
  4. man pages' footers: "dtrun VERSION" is `dtrun --version`'s, and the date
     is not older than the page's last change (when git knows it);
  5. no sentence or clause is written twice in one paragraph.
Exit 0 when everything holds, 1 otherwise.
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.environ.get("DOCS_ROOT") or os.path.join(os.path.dirname(__file__), "..", ".."))
DTRUN = os.environ.get("DTRUN", os.path.join(ROOT, "bin", "dtrun"))
SUBCOMMANDS = ("generate", "eval", "export", "classify", "inspect", "tokenize", "plot", "rdzv", "worker")
failures = []
# --update: rewrite the README's and the configs' transcripts with what the
# binary prints now (then read the diff: the prose around them may need it too)
UPDATE = "--update" in sys.argv[1:]
updates = {}


def fail(where, what):
    failures.append(f"{where}: {what}")


def run(args, timeout=60):
    env = dict(os.environ)
    env.setdefault("OPENBLAS_CORETYPE", "Haswell")
    p = subprocess.run([DTRUN] + args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout, env=env)
    return p.returncode, p.stdout.decode("utf-8", "replace")


# ---- sources -----------------------------------------------------------------

def roff_text(line):
    """A man page line inside .nf/.fi as it renders (the escapes this tree uses)."""
    line = re.sub(r"\\f[BIRP]", "", line)
    line = re.sub(r"\\f\(..", "", line)
    repl = {r"\-": "-", r"\e": "\\", r"\(mu": "×", r"\(ti": "~", r"\(ha": "^", r"\(~=": "≈",
            r"\&": "", r"\(aq": "'", r"\(dq": '"', r"\(em": "—", r"\(en": "–", r"\ ": " ", r"\|": ""}
    for k, v in repl.items():
        line = line.replace(k, v)
    return line


def blocks():
    """(file, first line number, [lines]) of every example block: README fences,
    man .nf/.fi blocks, config comment paragraphs (lines after '# ' / '#   ')."""
    out = []
    readme = os.path.join(ROOT, "README.md")
    with open(readme, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append(("README.md", i + 2, lines[i + 1:j]))
            i = j + 1
        else:
            i += 1
    for page in ("man/dtrun.1", "man/dtrun-job.5"):
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            if lines[i].startswith(".nf"):
                j = i + 1
                while j < len(lines) and not lines[j].startswith(".fi"):
                    j += 1
                out.append((page, i + 2, [roff_text(x) for x in lines[i + 1:j]]))
                i = j + 1
            else:
                i += 1
    for dirpath, _, files in os.walk(os.path.join(ROOT, "configs")):
        for name in sorted(files):
            if not name.endswith(".yaml"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, ROOT)
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
            cur, start = [], 0
            for n, line in enumerate(lines, 1):
                if line.startswith("#"):
                    if not cur:
                        start = n
                    cur.append(line[1:])
                else:
                    if cur:
                        out.append((rel, start, cur))
                    cur = []
            if cur:
                out.append((rel, start, cur))
    return out


# ---- 1 and 2: transcripts and commands ---------------------------------------

COMMAND = re.compile(r"^\s*(?:\$\s+)?(?:bin/)?dtrun(\s.*)?$")


def command_text(lines, i):
    """The command starting at lines[i] with its continuation lines; (text, next index)."""
    text = lines[i]
    while text.rstrip().endswith("\\") and i + 1 < len(lines):
        i += 1
        text = text.rstrip()[:-1] + " " + lines[i].strip()
    return text, i + 1


def split_command(text):
    """The dtrun arguments of a command line, its trailing '# comment' and
    backquote quoting dropped; None when it does not parse as a shell word list."""
    text = text.strip()
    if text.startswith("$"):
        text = text[1:]
    text = text.strip().strip("`").strip()
    m = re.match(r"^(?:bin/)?dtrun\b(.*)$", text)
    if not m:
        return None
    rest = m.group(1)
    try:
        words = shlex.split(rest, comments=True)
    except ValueError:
        return None
    # prose after the command ("... job.yaml`. ~20 s on 2 cores.")
    cut = []
    for w in words:
        if w.startswith("`") or w.endswith("`."):
            break
        cut.append(w.rstrip("`"))
    return cut


_usage_cache = {}


def usage_of(sub):
    if sub not in _usage_cache:
        rc, out = run([sub, "--help"] if sub else ["--help"])
        _usage_cache[sub] = (rc, out)
    return _usage_cache[sub]


def flag_known(flag, usage):
    name = flag.split("=", 1)[0]
    if name in ("--", "-"):
        return True
    variants = {name, name.replace("_", "-")}
    return any(re.search(r"(?<![\w-])" + re.escape(v) + r"(?![\w-])", usage) for v in variants)


def flags_with_value(usage):
    """The options a usage text shows with a value after them ("--top K",
    "--format text|json"); a usage's columns are separated by 2+ spaces."""
    takes = set()
    for seg in re.split(r"\s{2,}|\n", usage):
        words = seg.replace("[", " ").replace("]", " ").replace("(", " ").replace(")", " ").split()
        for k, w in enumerate(words):
            for name in w.split("/"):
                if name.startswith("-") and len(name) > 1:
                    nxt = words[k + 1] if k + 1 < len(words) else ""
                    if "=" in name:
                        takes.add(name.split("=")[0])
                    elif nxt and not nxt.startswith("-") and nxt != "|":
                        takes.add(name)
    return takes


def is_placeholder(word):
    base = os.path.basename(word)
    return bool(re.search(r"[A-Z]{2,}|\*|\.\.\.", base)) and not os.path.exists(os.path.join(ROOT, word))


def check_command(where, args):
    if not args:
        return
    sub = args[0] if args[0] in SUBCOMMANDS else ""
    rc, usage = usage_of(sub)
    if rc != 0:
        fail(where, f"`dtrun {sub + ' ' if sub else ''}--help` exits {rc}")
        return
    words = args[1:] if sub else args
    takes = flags_with_value(usage)
    k = 0
    while k < len(words):
        w = words[k]
        if w == "--":
            break  # the program's own arguments
        if w.startswith("-") and len(w) > 1 and not re.match(r"^-\d", w):
            name = w.split("=", 1)[0]
            if not flag_known(w, usage):
                fail(where, f"dtrun {sub + ' ' if sub else ''}: option '{name}' is not in its --help")
            if "=" not in w and (name in takes or name.replace("_", "-") in takes):
                k += 1
        elif not sub:
            break  # the job file, script or program: what follows is its own
        k += 1
    if sub or "--" in words:
        return
    jobs = [w for w in words if w.endswith((".yaml", ".yml")) and not w.startswith("-")]
    if len(jobs) != 1 or is_placeholder(jobs[0]) or not os.path.exists(os.path.join(ROOT, jobs[0])):
        return
    if "--plan" in words or "--dry-run" in words or "--print-config" in words:
        cmd = list(words)
    else:
        cmd = ["--dry-run"] + list(words)
    rc, out = run(cmd)
    if rc != 0:
        last = out.strip().split("\n")[-1] if out.strip() else ""
        fail(where, f"`dtrun {' '.join(words)}` would not start: {last}")


def transcript_match(expected, got):
    """expected lines against got lines; a line '...' matches any number of lines."""
    def m(i, j):
        if i == len(expected):
            return j == len(got)
        if expected[i].strip() == "...":
            return any(m(i + 1, k) for k in range(j, len(got) + 1))
        return j < len(got) and expected[i].rstrip() == got[j].rstrip() and m(i + 1, j + 1)
    return m(0, 0)


def first_difference(expected, got):
    k = 0
    while k < len(expected) and k < len(got) and expected[k].rstrip() == got[k].rstrip():
        k += 1
    if k < len(expected) and expected[k].strip() == "...":
        return "(after a '...' line)"
    e = expected[k].rstrip() if k < len(expected) else "(end)"
    g = got[k].rstrip() if k < len(got) else "(end)"
    return f"output line {k + 1} is\n    docs:   {e}\n    binary: {g}"


def check_blocks():
    for path, first, lines in blocks():
        is_config = path.startswith("configs/")
        i = 0
        while i < len(lines):
            line = lines[i]
            stripped = line.strip()
            if not COMMAND.match(stripped) and not (is_config and re.search(r"(?:^|\s|`)(?:bin/)?dtrun\s", stripped)):
                i += 1
                continue
            where = f"{path}:{first + i}"
            if stripped.startswith("$"):
                text, nxt = command_text(lines, i)
                args = split_command(text)
                # a transcript: the lines after it up to the next "$ " line or the block's
                # end (in a config's comment: up to a line indented less than the "$")
                indent = len(line) - len(line.lstrip())
                out = []
                j = nxt
                while j < len(lines):
                    nl = lines[j]
                    if nl.strip().startswith("$ ") and len(nl) - len(nl.lstrip()) == indent:
                        break
                    if is_config and nl.strip() and len(nl) - len(nl.lstrip()) < indent:
                        break
                    out.append(nl[indent:] if nl[:indent].strip() == "" else nl)
                    j += 1
                while out and not out[-1].strip():
                    out.pop()
                if args is None:
                    fail(where, "cannot parse the command")
                elif out:
                    rc, got = run(args)
                    got_lines = got.rstrip("\n").split("\n")
                    if not transcript_match(out, got_lines) and UPDATE and not path.startswith("man/") \
                            and not any(x.strip() == "..." for x in out):
                        prefix = "#" if is_config else ""
                        updates.setdefault(path, []).append(
                            (first + nxt, len(out), [(prefix + " " * indent + g).rstrip() if g else prefix.rstrip() for g in got_lines]))
                    elif not transcript_match(out, got_lines):
                        fail(where, f"`dtrun {' '.join(args)}` prints something else: {first_difference(out, got_lines)}")
                    check_command(where, args)
                else:
                    check_command(where, args)
                i = j
                continue
            if is_config:
                m = re.search(r"(?:bin/)?dtrun\s.*", stripped)
                text = m.group(0) if m else stripped
            else:
                text = stripped
            text, nxt = command_text([text] + lines[i + 1:], 0)
            nxt = i + nxt
            args = split_command(text)
            if args is None:
                fail(where, "cannot parse the command")
            else:
                check_command(where, args)
            i = nxt


# ---- 3: PRESETS ------------------------------------------------------------------

def check_presets():
    page = "man/dtrun-job.5"
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        lines = f.read().split("\n")
    try:
        start = lines.index(".SH PRESETS")
    except ValueError:
        fail(page, "no PRESETS section")
        return
    rows = {}
    in_table = False
    for n in range(start, len(lines)):
        line = lines[n]
        if line.startswith(".TS"):
            in_table = True
            continue
        if line.startswith(".TE"):
            break
        if in_table and "\t" in line and not line.endswith("."):
            cells = [roff_text(c) for c in line.split("\t")]
            if cells[0] != "name":
                rows[cells[0]] = (n + 1, cells)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write("model: {preset: no-such-preset}\n")
        probe = f.name
    rc, out = run(["--print-config", probe])
    os.unlink(probe)
    m = re.search(r"\(presets: ([^)]*)\)", out)
    if not m:
        fail(page, f"the binary did not list its presets: {out.strip()}")
        return
    known = [p.strip() for p in m.group(1).split(",")]
    for p in known:
        if p not in rows:
            fail(f"{page}:{start + 1}", f"preset '{p}' is not in the PRESETS table")
    for name, (n, cells) in rows.items():
        where = f"{page}:{n}"
        if name not in known:
            fail(where, f"the table lists '{name}', which the binary does not know")
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(f"model: {{preset: {name}}}\n")
            job = f.name
        rc, out = run(["--print-config", job])
        os.unlink(job)
        if rc != 0:
            fail(where, f"--print-config of preset {name} exits {rc}")
            continue
        model = {}
        sect = None
        for line in out.split("\n"):
            if re.match(r"^\S", line):
                sect = line.rstrip(":")
            elif sect == "model":
                mm = re.match(r"^\s+(\w+):\s*(.*?)\s*(#.*)?$", line)
                if mm:
                    model[mm.group(1)] = mm.group(2).strip('"')
        header = ["name", "layers", "heads", "d_model", "d_ff"]
        keys = {"layers": "n_layer", "heads": "n_head", "d_model": "d_model", "d_ff": "d_ff"}
        for col, cell in zip(header[1:], cells[1:5]):
            if model.get(keys[col]) != cell.strip():
                fail(where, f"preset {name}: {col} {cell.strip()} in the table, {model.get(keys[col])} in the binary")
        other = cells[5] if len(cells) > 5 else ""
        for label, key in (("vocab", "vocab_size"), ("seq", "seq_len"), ("kv", "n_kv_head"),
                           ("ch", "channels"), ("cls", "n_classes")):
            for num in re.findall(r"(\d+)\s*" + label if label in ("ch", "cls", "kv") else label + r"\s+(\d+)", other):
                if model.get(key) != num:
                    fail(where, f"preset {name}: {label} {num} in the table, {model.get(key)} in the binary")
        mm = re.search(r"(\d+)px/(\d+)", other)
        if mm:
            for num, key in ((mm.group(1), "image_size"), (mm.group(2), "patch_size")):
                if model.get(key) != num:
                    fail(where, f"preset {name}: {key} {num} in the table, {model.get(key)} in the binary")


# ---- 4: footers --------------------------------------------------------------------

def check_footers():
    rc, out = run(["--version"])
    m = re.match(r"dtrun (\S+)", out)
    version = m.group(1) if m else None
    for page in ("man/dtrun.1", "man/dtrun-job.5"):
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            lines = f.read().split("\n")
        th = next(((n, l) for n, l in enumerate(lines, 1) if l.startswith(".TH ")), None)
        if not th:
            fail(page, "no .TH line")
            continue
        n, line = th
        words = shlex.split(line[4:])
        date = words[2] if len(words) > 2 else ""
        source = words[3] if len(words) > 3 else ""
        if version and source != f"dtrun {version}":
            fail(f"{page}:{n}", f"footer says '{source}', the binary is dtrun {version}")
        try:
            p = subprocess.run(["git", "log", "-1", "--format=%cs", "--", page], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=30)
            last = p.stdout.decode().strip()
        except (OSError, subprocess.TimeoutExpired):
            last = ""
        if last and date[:len(last)] < last[:len(date)]:
            fail(f"{page}:{n}", f"footer date '{date}' is older than the page's last change ({last})")


# ---- 5: repeated sentences -----------------------------------------------------------

def paragraphs(path):
    """(first line number, text) of each paragraph: blank lines part them, and
    in a man page every request line (.PP, .TP, .SH ...) does."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    man = path.startswith("man/")
    cur, start = [], 1
    for n, line in enumerate(lines, 1):
        brk = not line.strip() or (man and line.startswith(".") and not line.startswith((".B ", ".I ", ".BR ", ".IR ", ".RB ")))
        if brk:
            if cur:
                yield start, "\n".join(cur)
            cur = []
            continue
        if not cur:
            start = n
        cur.append(roff_text(re.sub(r"^\.(?:B|I|BR|IR|RB) ", "", line)) if man else line)
    if cur:
        yield start, "\n".join(cur)


def check_repeats():
    for path in ("README.md", "man/dtrun.1", "man/dtrun-job.5"):
        for n, para in paragraphs(path):
            # list items and table rows are paragraphs of their own
            for item in re.split(r"\n(?=\s*(?:[-*|] |\d+\. ))", para):
                flat = re.sub(r"\s+", " ", re.sub(r"^\s*#\s?", "", item, flags=re.M)).strip()
                seen = set()
                for clause in re.split(r"(?<=[.;!?])\s+|,\s+", flat):
                    c = clause.strip(" .;,").lower()
                    if len(c.split()) < 4:
                        continue
                    if c in seen:
                        fail(f"{path}:{n}", f"written twice in one paragraph: '{clause.strip()}'")
                    seen.add(c)


def main():
    if not os.access(DTRUN, os.X_OK):
        print(f"docs_check: {DTRUN} not built", file=sys.stderr)
        return 2
    check_blocks()
    for path, edits in updates.items():
        full = os.path.join(ROOT, path)
        with open(full, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for start, count, new in sorted(edits, reverse=True):
            lines[start - 1:start - 1 + count] = new
        with open(full, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        print(f"docs_check: updated {len(edits)} transcript(s) in {path}")
    check_presets()
    check_footers()
    check_repeats()
    for f in failures:
        print(f)
    print(f"docs_check: {len(failures)} problem(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
