#!/usr/bin/python3
"""gen_man.py [REPO] - write the man pages that are made from docs/:
sluice.ini(5) from docs/configuration.md (its file syntax and key table),
sluice-rules(5) and sluice-users(5) from the key tables of
docs/rate-limits.md and docs/users.md, into conf/; and the lists in the
hand-written sluice(8) (keys, metrics) and sluice-commands(7) (error
replies, from docs/errors.md) between their BEGIN/END markers. tools/check_docs.py
(so `make test`) fails when a committed page is not what this makes of
the docs, and the docs' tables are checked against the code: the key
lists cannot drift. sluice(8) and sluice-commands(7) are written by hand
(conf/), but for sluice(8)'s key list, which this fills in between its
KEYS markers; the test checks what they must name."""

import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

DATE = "2026-11-28"


def roff_text(md):
    """One markdown paragraph or cell as roff text (no leading dot)."""
    s = md.replace("\\|", "|")
    s = s.replace("\\", "\\e")
    s = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r"\1", s)          # links: their text
    s = re.sub(r"\*\*([^*]+)\*\*", r"\\fB\1\\fR", s)
    s = re.sub(r"`([^`]+)`", lambda m: "\\fB" + m.group(1).replace("-", "\\-") + "\\fR", s)
    s = re.sub(r"\*([^*\s][^*]*)\*", r"\\fI\1\\fR", s)
    s = s.replace("\u00b5", "u")
    lines = []
    for line in s.split("\n"):
        line = line.strip()
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def md_rows(text, heading):
    """The rows (cell lists) of the first table after HEADING."""
    start = text.index(heading)
    rows = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            if not re.match(r"^\|\s*-", line):
                rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
        elif rows:
            break
    return rows[1:]   # without the header row


def md_section(text, heading):
    """The paragraphs of a markdown section, up to the next heading."""
    start = text.index(heading) + len(heading)
    end = text.find("\n#", start)
    return text[start:end if end >= 0 else None].strip()


def paragraphs(md):
    """Markdown paragraphs and bullet lists as roff (.PP / .IP)."""
    out = []
    for block in re.split(r"\n\s*\n", md.strip()):
        items = re.split(r"\n(?=\* )", block)
        if block.startswith("* "):
            for item in items:
                out += [".IP \\(bu 2", roff_text(re.sub(r"\s*\n\s*", " ", item[2:]))]
        else:
            out += [".PP", roff_text(re.sub(r"\s*\n\s*", " ", block))]
    return out


def head(name, section, title):
    return [f'.TH {name.upper()} {section} "{DATE}" "sluice" "{title}"',
            ".\\\" Made by tools/gen_man.py from docs/: edit the docs, then run it."]


def sluice_ini(root):
    doc = (root / "docs/configuration.md").read_text()
    out = head("sluice.ini", 5, "File formats")
    out += [".SH NAME", "sluice.ini \\- configuration file of sluice, the Redis-protocol proxy",
            ".SH SYNOPSIS", "/etc/sluice/sluice.ini", ".SH DESCRIPTION"]
    out += paragraphs(md_section(doc, "# Configuration: sluice.ini"))
    out += [".SH SYNTAX"] + paragraphs(md_section(doc, "## File syntax"))
    out += [".SH KEYS", ".PP",
            "Every key of [proxy], its default, the range of numbers, and whether a "
            "change takes effect at a reload (SIGHUP, PROXY RELOAD) or needs a restart "
            "(a hand-over restart: kill \\-USR2, systemctl reload). Sizes take k, kb, m, "
            "mb, g, gb."]
    for key, meaning, default, rng, applies in md_rows(doc, "## `[proxy]` keys"):
        name = key.strip("`")
        facts = [f"default: {default}" if default else "no default"]
        if rng:
            facts.append(f"range: {rng}")
        facts.append(f"applies: {applies}")
        out += [".TP", f".B {name}", roff_text(meaning) + ".", ".br",
                roff_text("; ".join(facts)) + "."]
    rest = doc[doc.index("## `[proxy]` keys"):]
    rest = rest[rest.index("\n\n", rest.index("| --- |")) + 2:]
    out += [".SH NOTES"] + paragraphs(rest)
    out += [".SH SEE ALSO", "sluice(8), sluice-rules(5), sluice-users(5), sluice-commands(7);",
            "/usr/share/doc/sluice/docs/configuration.md"]
    return "\n".join(out) + "\n"


def file_page(root, name, doc_name, heading, synopsis, description, see):
    doc = (root / "docs" / doc_name).read_text()
    out = head(name, 5, "File formats")
    out += [".SH NAME", f"{name} \\- {description}", ".SH SYNOPSIS", synopsis,
            ".SH DESCRIPTION"]
    intro = doc[doc.index(heading):]
    out += [".PP", roff_text(re.sub(r"\s*\n\s*", " ",
                                    intro[len(heading):intro.index("\n|")].strip()))]
    out += [".PP", "The file syntax (comments, continuation lines, line length) is "
            "sluice.ini's: see sluice.ini(5), SYNTAX.", ".SH KEYS"]
    for cells in md_rows(doc, heading):
        out += [".TP", f".B {cells[0].strip('`')}", roff_text(cells[1]) + ".", ".br",
                roff_text(f"default: {cells[2]}") + "."]
    out += [".SH SEE ALSO", see, f"/usr/share/doc/sluice/docs/{doc_name}"]
    return "\n".join(out) + "\n"


def fill(page, marker, lines):
    """PAGE with the lines between its `.\\" MARKER BEGIN` and
    `.\\" MARKER END` comments replaced by LINES."""
    begin = page.index(f'.\\" {marker} BEGIN')
    begin = page.index("\n", begin) + 1
    end = page.index(f'.\\" {marker} END')
    return page[:begin] + "\n".join(lines) + "\n" + page[end:]


def sluice_8(root):
    """conf/sluice.8 with its key list (KEYS markers: each key, its default
    and whether a reload applies it) and its metric list (METRICS markers:
    each metric, its type and labels) made afresh."""
    page = (root / "conf/sluice.8").read_text()
    doc = (root / "docs/configuration.md").read_text()
    keys = []
    for key, _meaning, default, _rng, applies in md_rows(doc, "## `[proxy]` keys"):
        keys += [".TP", f".B {key.strip('`')}",
                 roff_text(f"default: {default or 'none'}; applies: {applies}") + "."]
    page = fill(page, "KEYS", keys)
    import check_docs   # the metrics table of the code: names, types, labels
    rows = md_rows((root / "docs/metrics.md").read_text(), "## Metrics")
    metrics = []
    for name, kind, labels in check_docs.metrics_list(root):
        what = next((r[3] for r in rows if f"`{name}`" in r[0]), "")
        labels = "labels: " + ", ".join(labels.split(",")) if labels else "no labels"
        metrics += [".TP", f".B sluice_{name}",
                    roff_text(f"{(kind or '?').lower()}; {labels}. {what}")]
    return fill(page, "METRICS", metrics)


def sluice_commands_7(root):
    """conf/sluice-commands.7 with its ERRORS list (ERRORS markers) made
    from docs/errors.md: each error text and when it comes."""
    page = (root / "conf/sluice-commands.7").read_text()
    doc = (root / "docs/errors.md").read_text()
    lines = []
    for heading in re.findall(r"^## (.*)$", doc, re.M):
        lines += [".SS " + roff_text(heading)]
        for text, when, whose in md_rows(doc, "## " + heading):
            lines += [".TP", roff_text(text), roff_text(f"{when} ({whose}).")]
    return fill(page, "ERRORS", lines)


def pages(root):
    root = pathlib.Path(root)
    return {
        "sluice.8": sluice_8(root),
        "sluice-commands.7": sluice_commands_7(root),
        "sluice.ini.5": sluice_ini(root),
        "sluice-rules.5": file_page(
            root, "sluice-rules", "rate-limits.md", "## The rule file",
            "rules = FILE in [proxy] of sluice.ini(5); example: /usr/share/sluice/rules.ini",
            "rate-limit rules of sluice", "sluice(8), sluice.ini(5), sluice-users(5)"),
        "sluice-users.5": file_page(
            root, "sluice-users", "users.md", "## The users file",
            "users = FILE in [proxy] of sluice.ini(5); example: /usr/share/sluice/users.ini",
            "users and permissions of sluice's clients",
            "sluice(8), sluice.ini(5), sluice-rules(5)"),
    }


if __name__ == "__main__":
    repo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1])
    for page, text in pages(repo).items():
        (repo / "conf" / page).write_text(text)
        print(f"conf/{page}")
