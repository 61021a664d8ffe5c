#!/usr/bin/python3
"""Loads an HTML page in headless Chromium and says what the browser saw.

    html_check.py PAGE.html WORKDIR

Prints one JSON object:
  console:  every console message the page caused (a page without script
            causes none: a refused fetch under its Content-Security-Policy,
            a resource that did not load and a parse problem all show here);
  charts:   the data-chart names of the <svg class="chart"> elements in the
            DOM Chromium built, with how many polylines, rects and circles each holds;
  pixels:   how many pixels of the rendered page (a 1100-wide screenshot)
            have each of the report's series colours, so a chart that is in
            the DOM but not drawn is caught.
Standard library only; Chromium is Debian's `chromium` (scripts/install-deps.sh --test).
"""
import json
import os
import re
import struct
import subprocess
import sys
import zlib

COLOURS = {"worker_a": (0x1F, 0x5F, 0xA8), "worker_b": (0xD1, 0x49, 0x5B), "memory": (0x7B, 0x5E, 0xA7)}


def chromium(args, workdir):
    cmd = ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--user-data-dir=" + os.path.join(workdir, "chromium-profile"), "--enable-logging=stderr", "--v=0"] + args
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, errors="replace")


def png_pixels(path):
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB or RGBA PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            if depth != 8 or colour not in (2, 6):
                raise ValueError("PNG depth %d colour type %d" % (depth, colour))
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, channels, rows


def main():
    page, workdir = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.makedirs(workdir, exist_ok=True)
    shot = os.path.join(workdir, "page.png")
    r = chromium(["--window-size=1100,4000", "--screenshot=" + shot, "file://" + page], workdir)
    console = [line for line in r.stderr.splitlines() if ":CONSOLE" in line]
    d = chromium(["--dump-dom", "file://" + page], workdir)
    charts = []
    for m in re.finditer(r'<svg class="chart" data-chart="([^"]*)"(.*?)</svg>', d.stdout, re.S):
        body = m.group(2)
        charts.append({"name": m.group(1), "polylines": body.count("<polyline"), "rects": body.count("<rect"),
                       "circles": body.count("<circle")})
    pixels = {k: 0 for k in COLOURS}
    if os.path.exists(shot):
        _, _, channels, rows = png_pixels(shot)
        wanted = {bytes(v): k for k, v in COLOURS.items()}
        for row in rows:
            for i in range(0, len(row), channels):
                k = wanted.get(row[i:i + 3])
                if k:
                    pixels[k] += 1
    print(json.dumps({"screenshot_status": r.returncode, "dump_status": d.returncode, "console": console,
                      "charts": charts, "pixels": pixels, "dom_bytes": len(d.stdout)}))


if __name__ == "__main__":
    main()
