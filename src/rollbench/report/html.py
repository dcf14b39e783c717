"""The page both reports share: one HTML file, inline CSS, no script, nothing fetched.

A report is opened from a laptop, a CI artifact or a cluster's shared disk, often with no
network; gauntlet's report.html loads its charts from a CDN and is blank offline. So the
charts are inline SVG, the style is inline, and the only other files a page names are the
videos next to it, by relative path.
"""

from __future__ import annotations

import html
import urllib.parse
from collections.abc import Iterable, Sequence

CSS = """
:root { color-scheme: light; --fg: #212529; --muted: #6c757d; --line: #dee2e6; --ok: #2b8a3e; --bad: #c92a2a; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       max-width: 1100px; margin: 0 auto; padding: 1.5rem; }
h1 { font-size: 1.5rem; margin: 0 0 .2rem; } h2 { font-size: 1.15rem; margin: 2rem 0 .6rem;
     border-bottom: 1px solid var(--line); padding-bottom: .2rem; }
.muted { color: var(--muted); } .ok { color: var(--ok); } .bad { color: var(--bad); }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(190px, 1fr)); gap: .6rem; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: .5rem .7rem; }
.card b { display: block; font-size: 1.25rem; } .card span { color: var(--muted); font-size: .85rem; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: .2rem .6rem; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
.scroll { overflow-x: auto; }
th:first-child, td:first-child { text-align: left; }
pre { background: #f1f3f5; padding: .6rem; overflow-x: auto; white-space: pre-wrap; word-break: break-all; }
svg { max-width: 100%; height: auto; }
.videos { display: flex; flex-wrap: wrap; gap: .8rem; }
figure { margin: 0; } figcaption { font-size: .85rem; color: var(--muted); max-width: 256px; }
video { width: 256px; height: 256px; background: #000; display: block; }
.warn { border-left: 4px solid #f08c00; background: #fff4e6; padding: .4rem .7rem; margin: .3rem 0; }
.verdict { font-size: 1.05rem; }
"""


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def page(title: str, body: Iterable[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{esc(title)}</title>",
            f"<style>{CSS}</style>",
            "</head><body>",
            *body,
            "</body></html>",
            "",
        ]
    )


def cards(items: Sequence[tuple[str, str]]) -> str:
    """Big numbers with a caption: [(value, caption), ...]."""
    inner = "".join(f'<div class="card"><b>{esc(v)}</b><span>{esc(c)}</span></div>' for v, c in items)
    return f'<div class="cards">{inner}</div>'


def table(header: Sequence[str], rows: Iterable[Sequence[object]], raw: bool = False) -> str:
    """A table of escaped cells (`raw=True`: cells are HTML already)."""
    cell = (lambda v: str(v)) if raw else esc
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def src(relative: str) -> str:
    """A relative path as a URL attribute value (spaces and '#' in names stay file names)."""
    return esc(urllib.parse.quote(relative))
