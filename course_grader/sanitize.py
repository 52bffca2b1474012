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
  format, so nbconvert shows them as text); markdown that refers to an attachment the cell
  does not carry is pointed nowhere (nbconvert would refuse to render the whole notebook),
  and TeX commands that make links or load code (`\\href`, `\\require`, ...) are taken out;
* error names and values and stream text are text already (nbconvert escapes them).

Cleaning the markdown source is not enough: nbconvert's markdown renderer turns
`[x](javascript:...)` into a live link and `![](http://...)` into an image fetched with the
reader's cookies. So `markdown_to_safe_html`, the `markdown2html` filter of every HTML page
made from a notebook (`c.HTMLExporter.filters` in nbgrader_config.py: feedback and the
formgrader), sanitizes the HTML that rendering produced, and shows a cell it cannot render as
plain text instead of failing the page. `SafeHTMLExporter` makes a page that says why for a
notebook that cannot be rendered at all, so one submission never stops the others' feedback.
"""

from __future__ import annotations

import html as html_lib
import re

import bleach
from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

__all__ = ["SAFE_MIME_TYPES", "SafeHTMLExporter", "SanitizeNotebook", "clean_html",
           "markdown_to_safe_html"]

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


# TeX commands that make a link, run or load code, or set raw HTML attributes (MathJax has them)
_UNSAFE_TEX = re.compile(r"\\(href|url|require|class|cssId|style|unicode|data|html|toggle"
                         r"|mmlToken|texttip|tooltip|statusline)(?![A-Za-z])")
_ATTACHMENT = re.compile(r"attachment:([^\s)\"'>]*)")


def _inert_markdown(source: str, attachments) -> str:
    source = _UNSAFE_TEX.sub(lambda m: r"\backslash " + m.group(1) + " ", source)
    return _ATTACHMENT.sub(lambda m: m.group(0) if m.group(1) in attachments
                           else "#missing-attachment", source)


@pass_context
def markdown_to_safe_html(context, source: str) -> str:
    """A markdown cell as HTML that cannot run script or fetch anything: rendered as
    nbconvert renders it, then cleaned by `clean_html` (links only to http, https and mailto;
    images only as data:). A cell that cannot be rendered is shown as its escaped text."""
    cell = context.get("cell", {}) if context is not None else {}
    attachments = {name: data for name, data in cell.get("attachments", {}).items()
                   if isinstance(data, dict) and data}
    source = _inert_markdown(source if isinstance(source, str) else str(source), attachments)
    try:
        # no heading anchors: the renderer writes an empty one as `<a ... />`, which HTML
        # reads as an open link around the rest of the cell (every line shown as a link)
        renderer = IPythonRenderer(escape=False, attachments=attachments, embed_images=False,
                                   exclude_anchor_links=True)
        rendered = MarkdownWithMath(renderer=renderer).render(source)
    except Exception as err:  # noqa: BLE001 - one cell never stops the page
        return (f"<p><em>This markdown cell could not be rendered "
                f"({html_lib.escape(type(err).__name__)}); its text:</em></p>"
                f"<pre>{html_lib.escape(source)}</pre>")
    return clean_html(rendered)


class SafeHTMLExporter(HTMLExporter):
    """nbconvert's HTMLExporter that answers a notebook it cannot render with a short page
    saying so (and why), instead of an error that stops the other submissions."""

    def from_notebook_node(self, nb, resources=None, **kw):
        try:
            return super().from_notebook_node(nb, resources, **kw)
        except Exception as err:  # noqa: BLE001 - the page says what went wrong
            self.log.error("could not render a notebook as HTML: %s: %s",
                           type(err).__name__, err)
            resources = dict(resources or {})
            resources.setdefault("output_extension", ".html")
            title = html_lib.escape(str(resources.get("nbgrader", {}).get("notebook", "")
                                        or "notebook"))
            reason = html_lib.escape(f"{type(err).__name__}: {err}"[:500])
            page = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
                    f"<title>{title}</title></head><body><h1>{title}</h1>"
                    f"<p>This notebook could not be shown as a page ({reason}). It was graded "
                    f"all the same: ask your instructor for your scores.</p></body></html>\n")
            return page, resources


class SanitizeNotebook(Preprocessor):
    """Make a notebook's markdown, raw cells and outputs inert (see the module docstring)."""

    enabled = Bool(True, help="nbconvert preprocessors are off unless enabled").tag(config=True)

    def preprocess(self, nb, resources):
        nb.metadata.pop("widgets", None)   # nbconvert would load the widget manager's script
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown":
            for name, data in list(cell.get("attachments", {}).items()):
                kept = ({k: v for k, v in data.items() if k in SAFE_MIME_TYPES[1:]}
                        if isinstance(data, dict) else {})
                if kept:
                    cell.attachments[name] = kept
                else:
                    del cell.attachments[name]
            cell.source = _inert_markdown(clean_html(cell.source), cell.get("attachments", {}))
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
