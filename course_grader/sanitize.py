"""Nothing a submission wrote may run as script where an instructor or a student reads it.

The autograded notebook is rendered by the formgrader (on the Jupyter server's origin, in the
instructor's logged-in session) and turned into feedback HTML; a student controls its
markdown, raw cells and every output of their code. `SanitizeNotebook` (an nbconvert
preprocessor, run when autograding and again when generating feedback) makes all of it inert:

* outputs keep only the kinds of data that cannot carry script: text/plain, PNG, JPEG and GIF
  images, and text/html cleaned by an allow-list HTML sanitizer (bleach: known tags and
  attributes only, links to http, https and mailto, images only as data: PNG, JPEG or GIF);
  JavaScript, SVG, LaTeX and markdown outputs, widget views and anything unknown are dropped
  (their text/plain version stays);
* markdown and raw cells go through the same sanitizer (raw cells also lose their output
  format, so nbconvert shows them as text);
* error names and values and stream text are text already (nbconvert escapes them).
"""

from __future__ import annotations

import re

import bleach
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

__all__ = ["SAFE_MIME_TYPES", "SanitizeNotebook", "clean_html"]

SAFE_MIME_TYPES = ("text/plain", "image/png", "image/jpeg", "image/gif")
TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "caption", "code", "dd", "del", "div", "dl", "dt",
    "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre",
    "s", "samp", "small", "span", "strong", "sub", "sup", "table", "tbody", "td", "tfoot", "th",
    "thead", "tr", "u", "ul",
})
_DATA_IMAGE = re.compile(r"^data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*$")
_LINK = re.compile(r"^(https?:|mailto:)", re.IGNORECASE)


def _allowed(tag: str, name: str, value: str) -> bool:
    if name in ("title", "alt"):
        return True
    if tag == "a" and name == "href":
        return bool(_LINK.match(value.strip()))
    if tag == "img" and name == "src":
        return bool(_DATA_IMAGE.match(value.strip()))
    if tag == "img" and name in ("width", "height"):
        return value.strip().isdigit()
    if tag in ("td", "th") and name in ("colspan", "rowspan"):
        return value.strip().isdigit()
    return False


_CLEANER = bleach.sanitizer.Cleaner(tags=TAGS, attributes=_allowed,
                                    protocols=["http", "https", "mailto", "data"],
                                    strip=False, strip_comments=True)


def clean_html(html: str) -> str:
    """`html` with every tag and attribute outside the allow-list escaped or removed."""
    return _CLEANER.clean(html if isinstance(html, str) else str(html))


class SanitizeNotebook(Preprocessor):
    """Make a notebook's markdown, raw cells and outputs inert (see the module docstring)."""

    enabled = Bool(True, help="nbconvert preprocessors are off unless enabled").tag(config=True)

    def preprocess(self, nb, resources):
        nb.metadata.pop("widgets", None)   # nbconvert would load the widget manager's script
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown":
            cell.source = clean_html(cell.source)
            for name, data in list(cell.get("attachments", {}).items()):
                kept = {k: v for k, v in data.items() if k in SAFE_MIME_TYPES[1:]}
                if kept:
                    cell.attachments[name] = kept
                else:
                    del cell.attachments[name]
        elif cell.cell_type == "raw":
            cell.source = clean_html(cell.source)
            cell.metadata.pop("format", None)
            cell.metadata.pop("raw_mimetype", None)
        elif cell.cell_type == "code":
            for output in cell.get("outputs", []):
                self._output(output)
        return cell, resources

    @staticmethod
    def _output(output) -> None:
        if output.get("output_type") not in ("display_data", "execute_result"):
            return
        data = output.get("data", {})
        kept = {k: v for k, v in data.items() if k in SAFE_MIME_TYPES}
        if "text/html" in data:
            html = data["text/html"]
            kept["text/html"] = clean_html("".join(html) if isinstance(html, list) else html)
        if not kept:
            kept["text/plain"] = "[output removed: it could hold script]"
        output["data"] = kept
        output["metadata"] = {}
