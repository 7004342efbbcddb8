#!/usr/bin/env python3
"""Perplexity against bits/weight (over the ternary tensors) from scripts/results_stage2.sh's
results.tsv, as a dependency-free SVG; reference perplexities (BF16, Q8_0) as horizontal lines.

usage: scripts/plot_stage2.py results.tsv out.svg [--ref NAME=PPL ...]
"""
import argparse
import csv
import math

W, H, L, R, T, B = 640, 420, 70, 170, 30, 50


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsv")
    ap.add_argument("svg")
    ap.add_argument("--ref", action="append", default=[], help="NAME=PPL reference line")
    a = ap.parse_args()
    rows = [r for r in csv.DictReader(open(a.tsv), delimiter="\t") if r["ppl"] and r["bpw_ternary"]]
    pts = [(float(r["bpw_ternary"]), float(r["ppl"]), r["name"]) for r in rows]
    refs = [(n, float(v)) for n, v in (x.split("=", 1) for x in a.ref)]
    xs = [p[0] for p in pts] or [1.75, 3.0]
    ys = [p[1] for p in pts] + [v for _, v in refs]
    x0, x1 = min(xs) - 0.1, max(xs) + 0.1
    y0, y1 = math.log(min(ys) * 0.95), math.log(max(ys) * 1.05)  # log scale: ratios read evenly

    def px(x):
        return L + (x - x0) / (x1 - x0) * (W - L - R)

    def py(y):
        return T + (1 - (math.log(y) - y0) / (y1 - y0)) * (H - T - B)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">bits/weight over the ternary tensors</text>',
           f'<text x="14" y="{(T + H - B) / 2}" transform="rotate(-90 14 {(T + H - B) / 2})" text-anchor="middle">'
           'perplexity (log scale)</text>']
    steps = 6
    for i in range(steps + 1):
        x = x0 + (x1 - x0) * i / steps
        out.append(f'<text x="{px(x):.1f}" y="{H - B + 15}" text-anchor="middle">{x:.2f}</text>')
        y = math.exp(y0 + (y1 - y0) * i / steps)
        out.append(f'<text x="{L - 5}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.0f}</text>')
    for n, v in refs:
        out.append(f'<line x1="{L}" y1="{py(v):.1f}" x2="{W - R}" y2="{py(v):.1f}" stroke="gray" stroke-dasharray="5,4"/>')
        out.append(f'<text x="{W - R + 5}" y="{py(v) + 4:.1f}" fill="gray">{n} {v:.1f}</text>')
    for x, y, n in pts:
        out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="#1f77b4"/>')
        out.append(f'<text x="{px(x) + 7:.1f}" y="{py(y) - 6:.1f}">{n}</text>')
    out.append("</svg>")
    open(a.svg, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
