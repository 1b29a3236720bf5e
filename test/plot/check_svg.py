#!/usr/bin/env python3
"""check_svg.py — `dtrun plot`'s SVG checked two ways.

  check_svg.py svg FILE.svg RUN.jsonl...   structure, with Python's XML parser:
      an <svg> root with width/height, the three panels (loss, throughput,
      memory), each with a frame, tick labels, the x label "step" and a y label
      with its unit; per run a train-loss line with as many points as the run's
      loss records, a val-loss line likewise, a throughput line; a legend entry
      naming each run.
  check_svg.py png SHOT.png N_RUNS         a screenshot (PNG decoded here with
      zlib: no imaging library needed): in each of the three panels, pixels of
      every run's colour, i.e. the curves were drawn.
"""
import json
import struct
import sys
import xml.etree.ElementTree as ET
import zlib

NS = "{http://www.w3.org/2000/svg}"
COLORS = [(0x1f, 0x77, 0xb4), (0xd6, 0x27, 0x28), (0x2c, 0xa0, 0x2c)]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check_svg(path, runs):
    root = ET.parse(path).getroot()
    if root.tag != NS + "svg" or not root.get("width") or not root.get("height"):
        fail("root is not an <svg> with width and height")
    panels = {g.get("id"): g for g in root.iter(NS + "g") if g.get("class") == "panel"}
    for name, unit in (("loss", "loss (nats)"), ("throughput", "tokens/s"), ("memory", "peak memory per rank (MiB)")):
        g = panels.get("panel-" + name)
        if g is None:
            fail(f"no {name} panel")
        texts = [t.text for t in g.iter(NS + "text")]
        if name not in texts or "step" not in texts or unit not in texts:
            fail(f"{name} panel: title, 'step' or '{unit}' missing: {texts[:5]}")
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
    if len(lines.get("throughput", [])) != len(runs) or not lines.get("memory"):
        fail(f"throughput / memory lines: {lines.get('throughput')} {lines.get('memory')}")
    legend = [t.text for g in root.iter(NS + "g") if g.get("id") == "legend" for t in g.iter(NS + "text")]
    for run in runs:
        name = run.rsplit("/", 1)[-1][:-len(".jsonl")]
        if name not in legend:
            fail(f"legend lacks {name}: {legend}")
    print(f"ok: SVG structure: 3 panels with ticks and units, {sum(map(len, lines.values()))} lines, "
          f"legend {legend}")


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


def check_png(path, n_runs):
    w, h, bpp, rows = read_png(path)
    panel_w = w / 3
    counts = [[0] * n_runs for _ in range(3)]
    for y in range(h):
        row = rows[y]
        for x in range(w):
            px = tuple(row[x * bpp:x * bpp + 3])
            for r in range(n_runs):
                if all(abs(px[k] - COLORS[r][k]) <= 40 for k in range(3)):
                    counts[min(2, int(x / panel_w))][r] += 1
    print(f"screenshot {w}x{h}: pixels of each run's colour per panel (loss, throughput, memory): {counts}")
    for p, name in enumerate(("loss", "throughput", "memory")):
        # memory lines of runs with equal memory overlap: the last run drawn covers the others
        need = range(n_runs) if name != "memory" else [n_runs - 1]
        for r in need:
            if counts[p][r] < 50:
                fail(f"the {name} panel shows no curve of run {r} ({counts[p][r]} pixels)")
    print("ok: the screenshot shows every run's curves in the three panels")


if __name__ == "__main__":
    if sys.argv[1] == "svg":
        check_svg(sys.argv[2], sys.argv[3:])
    else:
        check_png(sys.argv[2], int(sys.argv[3]))
