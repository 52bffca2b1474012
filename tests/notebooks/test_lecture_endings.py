"""Every lecture ends like a textbook section: "## Summary", then "## Read next" (papers with
authors, year and arXiv id or venue, and the best free explanations), then "## Questions" (3-6,
at least one an experiment on the lecture's own code). And every arXiv id cited anywhere in the
lectures is one this file knows, so that a mistyped id fails here, not in a reader's browser."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT, notebooks, read

LECTURES = notebooks("lectures")

# Lectures whose Summary is followed by cells without a heading of their own before "Read next"
# (stem -> how many). None is, today: the Summary cell comes right before "Read next".
CELLS_BETWEEN_SUMMARY_AND_READ_NEXT: dict[str, int] = {}

# Every arXiv id a lecture may cite, checked against the paper's title when it was added.
KNOWN_ARXIV_IDS = {
    "1301.3781": "Mikolov et al., Efficient Estimation of Word Representations in Vector Space",
    "1406.1078": "Cho et al., Learning Phrase Representations using RNN Encoder-Decoder",
    "1409.0473": "Bahdanau et al., Neural Machine Translation by Jointly Learning to Align",
    "1409.1259": "Cho et al., On the Properties of Neural Machine Translation",
    "1409.3215": "Sutskever et al., Sequence to Sequence Learning with Neural Networks",
    "1410.5401": "Graves et al., Neural Turing Machines",
    "1502.03044": "Xu et al., Show, Attend and Tell",
    "1503.08895": "Sukhbaatar et al., End-To-End Memory Networks",
    "1506.03134": "Vinyals et al., Pointer Networks",
    "1508.01211": "Chan et al., Listen, Attend and Spell",
    "1508.04025": "Luong et al., Effective Approaches to Attention-based NMT",
    "1508.07909": "Sennrich et al., Neural Machine Translation of Rare Words with Subword Units",
    "1512.00567": "Szegedy et al., Rethinking the Inception Architecture (label smoothing)",
    "1606.03126": "Miller et al., Key-Value Memory Networks",
    "1606.05250": "Rajpurkar et al., SQuAD",
    "1607.06450": "Ba et al., Layer Normalization",
    "1608.05859": "Press and Wolf, Using the Output Embedding to Improve Language Models",
    "1609.08144": "Wu et al., Google's Neural Machine Translation System (WordPiece)",
    "1702.04521": "Daniluk et al., Frustratingly Short Attention Spans in Neural Language Modeling",
    "1705.03122": "Gehring et al., Convolutional Sequence to Sequence Learning",
    "1706.03762": "Vaswani et al., Attention Is All You Need",
    "1803.02155": "Shaw et al., Self-Attention with Relative Position Representations",
    "1804.07461": "Wang et al., GLUE",
    "1805.02867": "Milakov and Gimelshein, Online normalizer calculation for softmax",
    "1810.04805": "Devlin et al., BERT",
    "1902.10186": "Jain and Wallace, Attention is not Explanation",
    "1904.09751": "Holtzman et al., The Curious Case of Neural Text Degeneration",
    "1905.05950": "Tenney et al., BERT Rediscovers the Classical NLP Pipeline",
    "1905.09418": "Voita et al., Analyzing Multi-Head Self-Attention",
    "1905.10650": "Michel et al., Are Sixteen Heads Really Better than One?",
    "1906.01502": "Pires et al., How multilingual is Multilingual BERT?",
    "1906.02715": "Coenen et al., Visualizing and Measuring the Geometry of BERT",
    "1906.03731": "Serrano and Smith, Is Attention Interpretable?",
    "1906.04341": "Clark et al., What Does BERT Look At?",
    "1906.05714": "Vig, A Multiscale Visualization of Attention in the Transformer Model",
    "1907.11692": "Liu et al., RoBERTa",
    "1908.04626": "Wiegreffe and Pinter, Attention is not not Explanation",
    "1908.08593": "Kovaleva et al., Revealing the Dark Secrets of BERT",
    "1908.10084": "Reimers and Gurevych, Sentence-BERT",
    "1909.11942": "Lan et al., ALBERT",
    "1911.02150": "Shazeer, Fast Transformer Decoding: One Write-Head is All You Need",
    "2002.04745": "Xiong et al., On Layer Normalization in the Transformer Architecture",
    "2002.10957": "Wang et al., MiniLM",
    "2002.12327": "Rogers et al., A Primer in BERTology",
    "2004.05150": "Beltagy et al., Longformer: The Long-Document Transformer",
    "2004.08249": "Liu et al., Understanding the Difficulty of Training Transformers",
    "2004.10102": "Kobayashi et al., Attention is Not Only a Weight",
    "2005.00928": "Abnar and Zuidema, Quantifying Attention Flow in Transformers",
    "2006.16236": "Katharopoulos et al., Transformers are RNNs (linear attention)",
    "2012.14913": "Geva et al., Transformer Feed-Forward Layers Are Key-Value Memories",
    "2104.09864": "Su et al., RoFormer",
    "2112.05682": "Rabe and Staats, Self-attention Does Not Need O(n^2) Memory",
    "2205.14135": "Dao et al., FlashAttention",
    "2305.13245": "Ainslie et al., GQA: Training Generalized Multi-Query Transformer Models",
    "2307.08691": "Dao, FlashAttention-2: Faster Attention with Better Parallelism",
    "2309.06180": "Kwon et al., Efficient Memory Management for LLM Serving with PagedAttention",
    "2310.01889": "Liu et al., Ring Attention with Blockwise Transformers",
    "2312.00752": "Gu and Dao, Mamba: Linear-Time Sequence Modeling with Selective State Spaces",
    "2407.08608": "Shah et al., FlashAttention-3: Fast and Accurate Attention with Asynchrony",
}

# A paper without an arXiv id names where it appeared instead.
VENUES = ("JMLR", "Journal of Machine Learning Research", "NeurIPS", "NIPS", "ICML", "ICLR",
          "ACL", "EMNLP", "NAACL", "TACL", "ICASSP", "Distill", "Neural Computation",
          "Journal of Documentation")

HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$", re.MULTILINE)
YEAR = re.compile(r"\([^()]*\b(?:19|20)\d\d\b[^()]*\)")
ARXIV_WRITTEN = re.compile(r"arXiv:\s*(\S*\d)")  # whatever follows "arXiv:", to its last digit
ARXIV_ID = re.compile(r"\d{4}\.\d{4,5}")
ARXIV_ANYWHERE = re.compile(r"(?:arXiv:\s*|arxiv\.org/(?:abs|pdf)/)(\d{4}\.\d{4,5})", re.I)
URL = re.compile(r"https?://\S+")


def _id(path):
    return str(path.relative_to(ROOT))


def _headings(cells):
    """[(cell index, level, title)] of every markdown heading, in order, outside code fences."""
    found = []
    for index, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            continue
        text = re.sub(r"^```.*?^```", "", cell.source, flags=re.MULTILINE | re.DOTALL)
        found += [(index, len(m.group(1)), m.group(2)) for m in HEADING.finditer(text)]
    return found


def _items(body, marker):
    """The items of a markdown list whose items start with `marker` (a regex) at column 0;
    indented lines continue the item before them."""
    items = []
    for line in body.splitlines():
        if re.match(marker, line):
            items.append(re.sub(marker, "", line, count=1).strip())
        elif items and line.startswith(" ") and line.strip():
            items[-1] += " " + line.strip()
    return items


def _ending(path):
    cells = read(path).cells
    return cells, cells[-2].source, cells[-1].source


def test_there_are_lectures():
    assert len(LECTURES) >= 9


@pytest.mark.parametrize("path", LECTURES, ids=_id)
def test_the_last_sections_are_summary_read_next_and_questions(path):
    cells, read_next, questions = _ending(path)
    sections = [(i, title) for i, level, title in _headings(cells) if level == 2]
    assert [title for _, title in sections[-3:]] == ["Summary", "Read next", "Questions"], (
        f"the last three sections are {[t for _, t in sections[-3:]]}: a lecture ends with "
        "'## Summary', '## Read next', '## Questions', in that order")
    assert read_next.startswith("## Read next\n") and questions.startswith("## Questions\n"), (
        "'## Read next' and '## Questions' are the last two cells, each opening with its heading")
    for text in (read_next, questions):
        top = [m for m in HEADING.finditer(text) if len(m.group(1)) <= 2]
        assert len(top) == 1, f"one section per cell, found {[m.group(0) for m in top]}"
    summary = sections[-3][0]
    between = len(cells) - 2 - summary - 1
    allowed = CELLS_BETWEEN_SUMMARY_AND_READ_NEXT.get(path.stem, 0)
    assert between == allowed, (
        f"{between} cell(s) between the Summary and 'Read next' (expected {allowed}): "
        "'Read next' follows the Summary")


@pytest.mark.parametrize("path", LECTURES, ids=_id)
def test_read_next_cites_papers_with_year_and_arxiv_id_url_or_venue(path):
    _, read_next, _ = _ending(path)
    entries = _items(read_next, r"^[*-] ")
    assert 4 <= len(entries) <= 8, f"'Read next' has {len(entries)} entries; give 4 to 8"
    for entry in entries:
        assert YEAR.search(entry), f"no year in parentheses: {entry[:80]!r}"
        has_source = (ARXIV_WRITTEN.search(entry) or URL.search(entry)
                      or any(re.search(rf"\b{re.escape(v)}\b", entry) for v in VENUES))
        assert has_source, f"no arXiv id, URL or venue: {entry[:80]!r}"
        for written in ARXIV_WRITTEN.findall(entry):
            assert ARXIV_ID.fullmatch(written), (
                f"arXiv:{written} is not of the form arXiv:NNNN.NNNNN: {entry[:80]!r}")
        assert " — " in entry, f"say what to read it for, after ' — ': {entry[:80]!r}"


@pytest.mark.parametrize("path", LECTURES, ids=_id)
def test_questions_are_three_to_six_with_an_experiment(path):
    _, _, questions = _ending(path)
    items = _items(questions, r"^\d+\. ")
    numbers = [int(m) for m in re.findall(r"^(\d+)\. ", questions, flags=re.MULTILINE)]
    assert 3 <= len(items) <= 6, f"{len(items)} questions; ask 3 to 6"
    assert numbers == list(range(1, len(items) + 1)), f"questions numbered {numbers}"
    assert any(item.startswith("*Experiment.*") for item in items), (
        "at least one question is an experiment on the lecture's own code, marked '*Experiment.*'")


def test_every_arxiv_id_cited_in_the_lectures_is_a_known_one():
    unknown = {}
    for path in LECTURES:
        for cell in read(path).cells:
            for written in ARXIV_WRITTEN.findall(cell.source):
                assert ARXIV_ID.fullmatch(written), f"{path.name}: malformed arXiv:{written}"
            for arxiv_id in ARXIV_ANYWHERE.findall(cell.source):
                if arxiv_id not in KNOWN_ARXIV_IDS:
                    unknown.setdefault(arxiv_id, path.name)
    assert not unknown, (
        f"arXiv ids not in KNOWN_ARXIV_IDS (a typo, or add the paper after checking it): {unknown}")


def test_the_known_ids_are_well_formed():
    assert all(ARXIV_ID.fullmatch(i) for i in KNOWN_ARXIV_IDS)
