"""A minimal Markdown-to-HTML converter for the report (the ``markdown`` package is not a dependency).

Handles what ``studies.report`` writes: ATX headings, paragraphs, ``-`` lists, pipe tables
(with an alignment row), images, links, ``**bold**``, ``*italic*``, ```code``` and backslash
escapes (``\\*``). Text is
HTML-escaped first, so nothing in a caption can inject markup.
"""
from __future__ import annotations

import html
import math
import re

_INLINE = [
    (re.compile(r"`([^`]+)`"), lambda m: f"<code>{m.group(1)}</code>"),
    (re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)"), lambda m: f'<img src="{m.group(2)}" alt="{m.group(1)}">'),
    (re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)"), lambda m: f'<a href="{m.group(2)}">{m.group(1)}</a>'),
    (re.compile(r"\*\*(.+?)\*\*"), lambda m: f"<strong>{m.group(1)}</strong>"),
    (re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])"), lambda m: f"<em>{m.group(1)}</em>"),
]


def inline(text: str) -> str:
    """Escape, then apply the inline rules; code spans are protected from the later rules."""
    text = html.escape(text, quote=False)
    codes: list[str] = []

    def stash(m):
        codes.append(f"<code>{m.group(1)}</code>")
        return f"\x00{len(codes) - 1}\x00"

    text = _INLINE[0][0].sub(stash, text)
    text = re.sub(r"\\([*_`\[\]])", lambda m: f"&#{ord(m.group(1))};", text)  # backslash escapes
    for pat, rep in _INLINE[1:]:
        text = pat.sub(rep, text)
    return re.sub(r"\x00(\d+)\x00", lambda m: codes[int(m.group(1))], text)


def _cells(line: str) -> list[str]:
    line = line.strip()
    line = line.removeprefix("|")
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]


def _table(lines: list[str]) -> str:
    head, align, body = _cells(lines[0]), _cells(lines[1]), [_cells(ln) for ln in lines[2:]]
    al = ["right" if a.endswith(":") and not a.startswith(":") else "center" if a.startswith(":") and a.endswith(":")
          else "left" for a in align]

    def row(cells, tag):
        return "<tr>" + "".join(
            (f'<{tag} style="text-align:{al[i]}">' if i < len(al) and al[i] != "left" else f"<{tag}>")
            + inline(c) + f"</{tag}>" for i, c in enumerate(cells)) + "</tr>"

    return ("<table>\n<thead>" + row(head, "th") + "</thead>\n<tbody>\n"
            + "\n".join(row(r, "td") for r in body) + "\n</tbody>\n</table>")


def to_html(md: str, title: str = "Report") -> str:
    """The body of ``md`` as HTML, in a small standalone page."""
    out: list[str] = []
    blocks = re.split(r"\n\s*\n", md.strip("\n"))
    for block in blocks:
        lines = block.split("\n")
        first = lines[0]
        m = re.match(r"(#{1,6})\s+(.*)", first)
        if m and len(lines) == 1:
            n = len(m.group(1))
            slug = re.sub(r"[^a-z0-9]+", "-", m.group(2).lower()).strip("-")
            out.append(f'<h{n} id="{slug}">{inline(m.group(2))}</h{n}>')
        elif len(lines) >= 2 and first.lstrip().startswith("|") and re.fullmatch(r"\s*\|?[\s:|-]+\|?\s*", lines[1]):
            out.append(_table(lines))
        elif all(ln.startswith(("- ", "  ")) for ln in lines) and first.startswith("- "):
            items, cur = [], []
            for ln in lines:
                if ln.startswith("- ") and cur:
                    items.append(" ".join(cur))
                    cur = []
                cur.append(ln[2:].strip())
            items.append(" ".join(cur))
            out.append("<ul>\n" + "\n".join(f"<li>{inline(i)}</li>" for i in items) + "\n</ul>")
        else:
            out.append("<p>" + inline(" ".join(ln.strip() for ln in lines)) + "</p>")
    style = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;line-height:1.45}"
             "table{border-collapse:collapse;font-size:0.85em;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px;"
             "vertical-align:top}th{background:#f2f2f2}img{max-width:100%}code{background:#f4f4f4;padding:0 2px}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head>\n<body>\n" + "\n".join(out) + "\n</body></html>\n")


_PLAIN = {r"\epsilon": "ε", r"\Delta": "Δ", r"\sigma": "σ", r"\eta": "η", r"\theta": "θ", r"\to": "→",
          r"\mathcal{D}": "D", r"\frac": "", "{": "", "}": ""}


def plain(text: str) -> str:
    """Mathtext segments (``$...$``, for the figures) as plain text for the report: epsilon -> ε, no braces."""
    def convert(m):
        t = m.group(1)
        for k, v in _PLAIN.items():
            t = t.replace(k, v)
        return t

    return re.sub(r"\$([^$]*)\$", convert, text)


def num(x, fmt: str = ".3f") -> str:
    """``x`` formatted, ``-`` for None or NaN (the report's tables)."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(float(x), fmt)


def interval(r: dict) -> str:
    """``mean [low, high] (n = k)`` of an interval record of the verdicts."""
    return (f"{num(r.get('mean'), '+.3f')} [{num(r.get('low'), '+.3f')}, {num(r.get('high'), '+.3f')}] "
            f"(n = {r.get('n')})")
