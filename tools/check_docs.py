#!/usr/bin/python3
"""check_docs.py [REPO] - the docs say what the code does (issue 31).

Run by tests/integration/test_docs.py (so by `make test`); exits 1 and
prints one line per problem. What it reads from the code, and where it
wants to find it:

* config keys: proxy/base/config.c's config_keys[] (name and when a change
  applies) -> a row of docs/configuration.md's key table with the same
  "applies" and, for number keys, config_defaults()'s value as default;
  a line `key =` or `;key =` in conf/sluice.ini, the example that lists
  every key; conf/sluice.ini.5 must be what tools/gen_man.py makes of
  that table (so every key is in the man page too).
* rule and users file keys: rules/rules.c's rules_keys[] and
  proxy/access/users.c's users_keys[] -> a row of the key table of
  docs/rate-limits.md / docs/users.md, and conf/sluice-rules.5 /
  conf/sluice-users.5.
* metrics: proxy/base/metrics.h's METRICS_LIST (name, type, labels) -> a
  row of docs/metrics.md's table naming it, with its type and every label.
* PROXY subcommands: proxy/cmd/proxysub.h's PROXYSUB_LIST ->
  "PROXY NAME" in docs/*.md and conf/sluice-commands.7; PROXY INFO's
  sections (local_info_sections[]) -> docs/metrics.md's PROXY INFO part.
* verbs: proxy/verbs/lock.c's lock_verb_names[] and the options its
  lock_parse_options() takes -> docs/locks.md and conf/sluice-commands.7.
* error texts -> docs/errors.md. An error text is (ERROR_RULES below): a C
  string literal (adjacent literals joined) of proxy/ or rules/ that
  begins with "-CODE " (an upper-case error code) or "ERR "; the first string
  literal argument of a call to one of ERROR_FUNCS; a literal returned
  (or formatted with snprintf) by a *_parse* function of proxy/verbs/; a refusal reason of
  proxy/cmd/placement.c (#define WHY_CLUSTER_* and WHY_REPLCONF_ACK). Its
  fixed parts (between printf conversions, "-" and "ERR " left out) must
  appear in that order in one row of docs/errors.md (backticks and line
  breaks ignored).
* shell blocks: each fenced block of README.md and docs/*.md that is a
  shell or redis-cli session (info string sh, bash, shell or console, or
  a line that starts with "$ " or with one of SHELL_WORDS) must follow a
  `<!-- run: tour ... -->` marker (test_docs.py runs those) or a
  `<!-- not run: REASON -->` marker.
* links: every relative link of README.md, CHANGELOG.md and docs/*.md
  names a file that exists, and its #anchor a heading of that file
  (GitHub's anchors: lower case, punctuation dropped, blanks to "-").
"""

import pathlib
import re
import sys

ERROR_FUNCS = ("reply_error", "client_reply_error", "client_refuse", "client_fail_send",
               "client_protocol_error", "reqparse_fail", "cluster_fail", "sentinel_fail",
               "lock_ack_error", "backend_fail_soon", "split_part_error")
SHELL_WORDS = ("redis-cli", "make", "sudo", "sluice", "build/", "curl", "kill", "systemctl",
               "base64", "printf", "mkdir", "cp ")
LIT = r'"(?:[^"\\\n]|\\.)*"'
DOCS = ("README.md", "CHANGELOG.md", "docs/*.md")


def _literals(seq):
    return "".join(bytes(m[1:-1], "utf-8").decode("unicode_escape")
                   for m in re.findall(LIT, seq))


def _nocomments(src):
    return re.sub(r"/\*.*?\*/", lambda m: " " * len(m.group(0)), src, flags=re.S)


def _flat(text):
    """Text as the check compares it: no backticks, blanks collapsed."""
    return re.sub(r"\s+", " ", text.replace("`", "").replace("\\|", "|"))


def _table_rows(text):
    """Rows of every markdown table: lists of cells."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.match(r"^\|\s*-", line):
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows


def config_keys(root):
    """[(name, apply)] of config_keys[]; an entry this cannot read is
    returned with apply None (a problem, not a key skipped)."""
    src = re.sub(r"\s+", " ", (root / "proxy/base/config.c").read_text())
    table = src[src.index("config_keys[] = {"):src.index("#undef LIVE")]
    read = dict(re.findall(r'\{"(\w+)", config_set_\w+, F\(\w+\), [^,]+, [^,]+, \d, (\w+)\(',
                           table))
    return [(name, read.get(name)) for name in re.findall(r'\{"(\w+)",', table)]


def config_num_defaults(root):
    """{key: value} of the number keys (int and size setters): the value
    config_defaults() sets, 0 where it sets none."""
    src = (root / "proxy/base/config.c").read_text()
    flat = re.sub(r"\s+", " ", src)
    table = flat[flat.index("config_keys[] = {"):flat.index("#undef LIVE")]
    fields = dict(re.findall(r'\{"(\w+)", config_set_(?:int|bytes), F\((\w+)\)', table))
    body = src[src.index("static void config_defaults("):]
    body = body[:body.index("\n}\n")]
    sets = dict(re.findall(r"cfg->(\w+) = ([^;]+);", body))
    out = {}
    for key, field in fields.items():
        expr = sets.get(field, "0").replace("LL", "").replace("GB", str(1 << 30))
        try:
            out[key] = int(eval(expr, {"__builtins__": {}}))
        except (NameError, SyntaxError):
            out[key] = None
    return out


def _size(cell):
    """A default cell as a number: 16mb -> 16777216; another key's name
    (lock_failover_grace_ms's) as config_defaults() writes it: -1."""
    cell = cell.strip("`")
    m = re.fullmatch(r"(-?\d+)(k|kb|m|mb|g|gb)?", cell)
    if not m:
        return -1 if re.fullmatch(r"\w+_ms", cell) else cell
    unit = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get((m.group(2) or " ")[0], 1)
    return int(m.group(1)) * unit


APPLIES = {"LIVE": "reload", "LIVE_RENAME": "reload (on/off: restart)",
           "RESTART": "restart", "RESTART_LIST": "restart"}


def config_doc_rows(root):
    rows = {}
    for cells in _table_rows((root / "docs/configuration.md").read_text()):
        m = re.fullmatch(r"`(\w+)`", cells[0])
        if m and len(cells) == 5:
            rows[m.group(1)] = cells
    return rows


def check_config(root):
    problems = []
    rows = config_doc_rows(root)
    keys = config_keys(root)
    if len(keys) < 30:
        problems.append(f"config.c: only {len(keys)} keys read: the parser needs updating")
    for name, apply in keys:
        if apply is None:
            problems.append(f"config.c: entry '{name}' not understood by tools/check_docs.py")
        elif name not in rows:
            problems.append(f"docs/configuration.md: key `{name}` (config.c) has no row")
        elif rows[name][4] != APPLIES[apply]:
            problems.append(f"docs/configuration.md: `{name}` applies '{rows[name][4]}', "
                            f"config.c says '{APPLIES[apply]}'")
    for name, value in config_num_defaults(root).items():
        if name in rows and _size(rows[name][2]) != value:
            problems.append(f"docs/configuration.md: `{name}` defaults to {value} in "
                            f"config_defaults(), not '{rows[name][2]}'")
    example = (root / "conf/sluice.ini").read_text()
    for name, _ in keys:
        if not re.search(rf"^;?\s*{name}\s*=", example, re.M):
            problems.append(f"conf/sluice.ini: key {name} is not in the example (`;{name} = ...`)")
    for name in set(rows) - {k for k, _ in keys}:
        problems.append(f"docs/configuration.md: key `{name}` is not in config.c's table")
    sys.path.insert(0, str(root / "tools"))
    import gen_man
    for page, text in gen_man.pages(root).items():
        path = root / "conf" / page
        if not path.exists() or path.read_text() != text:
            problems.append(f"conf/{page} is not what tools/gen_man.py makes of the docs: "
                            f"run `tools/gen_man.py` and commit it")
    return problems


def check_file_keys(root):
    problems = []
    for src, doc, man, table in (("rules/rules.c", "docs/rate-limits.md", "conf/sluice-rules.5",
                                  "rules_keys"),
                                 ("proxy/access/users.c", "docs/users.md", "conf/sluice-users.5",
                                  "users_keys")):
        code = (root / src).read_text()
        body = code[code.index(table + "[KEY_COUNT] = {"):]
        body = body[:body.index("};")]
        keys = re.findall(r'\] = \{"(\w+)"', body)
        rows = {re.sub(r"`", "", c[0]) for c in _table_rows((root / doc).read_text())}
        mantext = (root / man).read_text() if (root / man).exists() else ""
        for k in keys:
            if k not in rows:
                problems.append(f"{doc}: key `{k}` ({src}) has no row in its key table")
            if not re.search(rf"^\.B {k}\b", mantext, re.M):
                problems.append(f"{man}: key {k} ({src}) is missing")
    return problems


def metrics_list(root):
    """[(name, type, labels)] of METRICS_LIST; an entry this cannot read
    comes back with type None."""
    src = (root / "proxy/base/metrics.h").read_text()
    src = src[src.index("#define METRICS_LIST(X)"):]
    src = src[:src.index("\n\n")]
    read = {m[0]: m for m in re.findall(r'X\((\w+), (COUNTER|GAUGE|HISTOGRAM), "([^"]*)"', src)}
    return [read.get(n, (n, None, "")) for n in re.findall(r"\bX\((\w+),", src)]


def check_metrics(root):
    problems = []
    rows = _table_rows((root / "docs/metrics.md").read_text())
    found = metrics_list(root)
    if len(found) < 20:
        problems.append(f"metrics.h: only {len(found)} metrics read: the parser needs updating")
    for name, kind, labels in found:
        if kind is None:
            problems.append(f"metrics.h: entry '{name}' not understood by tools/check_docs.py")
            continue
        row = next((r for r in rows if re.search(rf"`(sluice_)?{name}`", r[0])), None)
        if row is None or len(row) < 4:
            problems.append(f"docs/metrics.md: metric {name} has no row in the metrics table")
            continue
        if row[1] != kind.lower():
            problems.append(f"docs/metrics.md: {name} is a {kind.lower()}, not '{row[1]}'")
        for label in filter(None, labels.split(",")):
            if not re.search(rf"`{label}`", row[2]):
                problems.append(f"docs/metrics.md: {name}'s label {label} is not in its row")
    return problems


def check_commands(root):
    problems = []
    local = _nocomments((root / "proxy/client/local.c").read_text())
    # The one list of PROXY subcommands (proxysub.h): local.c's handlers
    # and the users module's grants are made from it.
    subh = _nocomments((root / "proxy/cmd/proxysub.h").read_text())
    subs = re.findall(r'^\s*X\((\w+), PROXYSUB_\w+\)', subh, re.M)
    sections = re.findall(r'^\s*\{"(\w+)", "\w+", \w+, [01]\}',
                          local[local.index("local_info_sections[] = {"):], re.M)
    docs = _flat("\n".join(p.read_text() for p in sorted((root / "docs").glob("*.md"))))
    man = (root / "conf/sluice-commands.7")
    mantext = _flat(re.sub(r"\\f[BIRP]", "", man.read_text())) if man.exists() else ""
    if len(subs) < 8 or len(sections) < 8:
        problems.append("local.c: PROXY subcommands or INFO sections not read")
    for s in subs:
        if f"PROXY {s.upper()}" not in docs:
            problems.append(f"docs: PROXY {s.upper()} (local.c) is not in docs/*.md")
        if f"PROXY {s.upper()}" not in mantext:
            problems.append(f"conf/sluice-commands.7: PROXY {s.upper()} is missing")
    metrics = (root / "docs/metrics.md").read_text()
    info = metrics[metrics.index("## PROXY INFO"):]
    info = _flat(info[:info.index("\n## ", 5)] if "\n## " in info[5:] else info)
    for s in sections:
        if f"{s}," not in info and f"{s} " not in info and f"{s};" not in info:
            problems.append(f"docs/metrics.md: PROXY INFO section '{s}' (local.c) is not listed")
    lock = _nocomments((root / "proxy/verbs/lock.c").read_text())
    verbs = re.findall(r'"(\w+)"', re.search(r"lock_verb_names\[\] = \{([^}]*)\}", lock).group(1))
    opts = lock[lock.index("lock_parse_options("):]
    opts = set(re.findall(r'sv_ieq\(argv\[i\], "(\w+)"\)', opts[:opts.index("\n}\n")]))
    locks = (root / "docs/locks.md").read_text()
    for v in verbs:
        if not re.search(rf"^{v.upper()} key", locks, re.M):
            problems.append(f"docs/locks.md: verb {v.upper()} has no syntax line")
        if not re.search(rf"\b{v.upper()} key", mantext):
            problems.append(f"conf/sluice-commands.7: verb {v.upper()} is missing")
    for o in opts:
        if not re.search(rf"\[{o.upper()}\b", locks) or f"{o.upper()}" not in mantext:
            problems.append(f"docs/locks.md or sluice-commands.7: option {o.upper()} is missing")
    return problems


def error_texts(root):
    """{text: "file:line"} of every error text, by ERROR_RULES (see above)."""
    found = {}
    files = sorted(list(root.glob("proxy/**/*.[ch]")) + list(root.glob("rules/*.[ch]")))
    calls = re.compile(r"\b(?:%s)\s*\(" % "|".join(ERROR_FUNCS))
    for f in files:
        raw = f.read_text()
        src = _nocomments(raw)
        where = lambda pos: f"{f.relative_to(root)}:{raw.count(chr(10), 0, pos) + 1}"  # noqa
        for m in re.finditer(r"(%s(?:\s*\\?\s*%s)*)" % (LIT, LIT), src):
            text = _literals(m.group(1))
            if re.match(r"^(-[A-Z]{2,}|ERR) ", text):
                found.setdefault(text, where(m.start()))
        for m in calls.finditer(src):
            depth, i = 1, m.end()
            while depth and i < len(src):
                depth += {"(": 1, ")": -1}.get(src[i], 0)
                i += 1
            lit = re.search(r"((?:%s\s*)+)" % LIT, src[m.end():i])
            if lit and not re.fullmatch(r'"%s"', lit.group(1).strip()):
                found.setdefault(_literals(lit.group(1)), where(m.end() + lit.start()))
        if "proxy/verbs/" in str(f):
            for m in re.finditer(r"\n\w[^\n]*\b(\w*_parse\w*)\([^)]*\)\n\{(.*?)\n\}", src, re.S):
                for r in re.finditer(r"\b(?:return|snprintf\([^,]*,[^,]*,)\s*([^;]*);", m.group(2)):
                    for lit in re.finditer(r"(?:%s\s*)+" % LIT, r.group(1)):
                        found.setdefault(_literals(lit.group(0)), where(m.start(2) + r.start()))
        if f.name == "placement.c":
            for m in re.finditer(r"#define (WHY_CLUSTER_\w+|WHY_REPLCONF_ACK) ((?:%s\s*\\?\s*)+)"
                                 % LIT, src):
                found.setdefault(_literals(m.group(2)), where(m.start()))
    return found


def _error_pattern(text):
    text = text.replace("\r\n", "").strip()
    text = re.sub(r"^-", "", text)
    text = re.sub(r"^ERR ", "", text)
    parts = [p.strip() for p in re.split(r"%[-+ #0-9.*]*(?:ll|l|z)?[a-zA-Z%]", text)]
    parts = [p for p in parts if len(p) >= 3]
    return parts


def check_errors(root):
    problems = []
    doc = root / "docs/errors.md"
    rows = [_flat(" | ".join(r)) for r in _table_rows(doc.read_text())] if doc.exists() else []
    texts = error_texts(root)
    if len(texts) < 50:
        problems.append(f"error texts: only {len(texts)} found: the extraction needs updating")
    for text, where in sorted(texts.items()):
        parts = [_flat(p) for p in _error_pattern(text)]
        if not parts or re.fullmatch(r"-?[A-Z]+", text.strip()):
            continue   # a bare code compared against, not sent
        pat = re.compile(".*?".join(re.escape(p) for p in parts), re.S)
        if not any(pat.search(r) for r in rows):
            problems.append(f"docs/errors.md: error text {text.strip()!r} ({where}) has no row")
    return problems


def _doc_files(root):
    out = []
    for pattern in DOCS:
        out += sorted(root.glob(pattern))
    return out


def check_shell_blocks(root):
    problems = []
    for path in _doc_files(root):
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = re.match(r"^```(\S*)", lines[i])
            if not m:
                i += 1
                continue
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            body = lines[i + 1:j]
            shell = m.group(1) in ("sh", "bash", "shell", "console") or any(
                l.startswith("$ ") or l.startswith(SHELL_WORDS) for l in body)
            if shell:
                k = i - 1
                while k >= 0 and lines[k].strip() == "":
                    k -= 1
                # the marker may span lines: find its start
                s = k
                while s >= 0 and "<!--" not in lines[s] and "-->" in "".join(lines[s:k + 1]):
                    s -= 1
                marker = "\n".join(lines[max(s, 0):k + 1])
                if not re.search(r"<!--\s*(run: tour|not run: \S)", marker) or "-->" not in lines[k]:
                    problems.append(f"{path.relative_to(root)}:{i + 1}: a shell block neither "
                                    f"run (<!-- run: tour -->) nor marked <!-- not run: why -->")
            i = j + 1
    return problems


def anchor(heading):
    h = heading.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def check_links(root):
    problems = []
    anchors = {}
    for path in _doc_files(root):
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
        anchors[path.resolve()] = {anchor(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}
    for path in _doc_files(root):
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
        text = re.sub(r"`[^`\n]*`", "", text)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, frag = target.partition("#")
            dest = (path.parent / file).resolve() if file else path.resolve()
            if not dest.exists():
                problems.append(f"{path.relative_to(root)}: link to {target}: no such file")
            elif frag and dest.suffix == ".md" and frag not in anchors.get(dest, set()):
                problems.append(f"{path.relative_to(root)}: link to {target}: no such heading")
    return problems


def check(root):
    root = pathlib.Path(root)
    problems = []
    for fn in (check_config, check_file_keys, check_metrics, check_commands, check_errors,
               check_shell_blocks, check_links):
        try:
            problems += fn(root)
        except (OSError, ValueError, AttributeError) as e:
            problems.append(f"{fn.__name__}: {e}")
    return problems


if __name__ == "__main__":
    found = check(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1])
    for p in found:
        print(p)
    sys.exit(1 if found else 0)
