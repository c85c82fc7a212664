#!/usr/bin/env bash
# Checks that every reference in the repository points into the repository (a stage of
# scripts/test.sh; docs/CONTRIBUTING.md#citations). It fails, listing file:line for each
# problem, when a file (outside target/, .git/ and node_modules/; this script excepted):
#   (a) mentions the team's notes outside the repository: the `shared` directory next to it
#       (as a relative path) or the "spec digest";
#   (b) cites a repository document (`docs/X.md`, `crates/.../X.md`, a Markdown link, or a bare
#       name such as `CONTRACTS.md`) that does not exist; a bare name must exist at the root or
#       next to the citing file, so `CONTRACTS.md` in code fails and `docs/CONTRACTS.md` passes;
#   (c) cites an anchor (`docs/X.md#anchor`, `[..](X.md#anchor)`, `[..](#anchor)`) that the
#       document does not define, as `<a id="anchor">` or as a heading's GitHub slug;
#   (d) cites a protocol rule `T<n>` or a requirement id `S-XXX-<n>` that docs/PROTOCOL.md does
#       not define (`<a id="t<n>">`, `<a id="s-xxx-<n>">`);
#   (e) cites an issue by its number (the word, a space, a number): no tracker is in the repository, so
#       the text must say what it means instead.
# `T<n>` counts as a rule only where a rule can be cited: anywhere in Markdown, shell, TOML,
# Python and JavaScript files; in Rust only inside comments and string literals, and never
# next to `<`, `>` or `::`, so a generic parameter such as `impl<T1: Read>` is not a citation.
# No network, no build: Python's standard library over the files git knows (tracked, or
# untracked and not ignored), or over a `find` of the tree outside a git checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  list_files() { git ls-files -z --cached --others --exclude-standard; }
else
  list_files() {
    find . \( -name target -o -name .git -o -name node_modules -o -name __pycache__ \) -prune \
      -o -type f -printf '%P\0'
  }
fi

list_files | python3 -c '
import os, re, sys, unicodedata

SELF = "scripts/check-docs.sh"
RULES_DOC = "docs/PROTOCOL.md"
SKIP_DIRS = ("target/", ".git/", "fuzz/target/", "fuzz/corpus/", "fuzz/artifacts/")
TEXT_EXT = (".rs", ".md", ".sh", ".toml", ".py", ".mjs", ".js", ".json", ".yml", ".yaml", ".txt")

files = []
for path in sys.stdin.buffer.read().decode().split("\0"):
    if not path or path == SELF or "node_modules/" in path or path.startswith(SKIP_DIRS):
        continue
    name = os.path.basename(path)
    if not os.path.isfile(path) or os.path.islink(path):
        continue
    if not (path.endswith(TEXT_EXT) or name in ("run",) or "." not in name):
        continue
    files.append(path)

problems = []
def problem(path, line, message):
    problems.append(f"{path}:{line}: {message}")

# ---- anchors a Markdown file defines ---------------------------------------------------------
anchor_cache = {}
def slug(heading):
    text = re.sub(r"<[^>]*>", "", heading).strip().lower()
    out = []
    for ch in text:
        if ch in " -":
            out.append("-")
        elif ch == "_" or ch.isalnum() or unicodedata.category(ch).startswith("L"):
            out.append(ch)
    return "".join(out)

def anchors(path):
    if path in anchor_cache:
        return anchor_cache[path]
    found, seen = set(), {}
    in_fence = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            found.update(re.findall(r"""<a\s+(?:id|name)=["\x27]([^"\x27]+)["\x27]""", line))
            m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                s = slug(m.group(1))
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else f"{s}-{n}")
    anchor_cache[path] = found
    return found

rule_anchors = anchors(RULES_DOC) if os.path.isfile(RULES_DOC) else set()
if not rule_anchors:
    problem(RULES_DOC, 0, "missing: the protocol rules T<n> are defined there")

# ---- patterns --------------------------------------------------------------------------------
OUTSIDE = re.compile(r"\.\./shar[e]d|spec[ -]digest", re.I)
ISSUE = re.compile(r"\bissu[e]s? #?[0-9]+", re.I)
REPO_PATH = re.compile(r"(?<![\w./-])((?:docs/[\w.-]+|(?:crates|scripts|interop|fuzz)/[\w./-]+)\.md)(?:#([\w-]+))?(?![\w])")
BARE_MD = re.compile(r"(?<![\w./#-])([A-Za-z][\w-]*\.md)(?:#([\w-]+))?(?![\w/])")
MD_LINK = re.compile(r"\]\(([^)\s]*)\)")
RULE = re.compile(r"(?<![\w<>:])T(\d+)(?![\w>]|::)")
REQ = re.compile(r"(?<![\w-])(S-[A-Z]+-\d+)(?![\w-])")
RUST_STRING = re.compile(r"\"(?:[^\"\\]|\\.)*\"")

def check_doc(path, lineno, target, anchor, base):
    """A cited document (and anchor); target is relative to base."""
    full = os.path.normpath(os.path.join(base, target))
    if not os.path.isfile(full):
        problem(path, lineno, f"cites {target} ({full}), which does not exist")
        return
    if anchor and full.endswith(".md") and anchor not in anchors(full):
        problem(path, lineno, f"cites {full}#{anchor}, an anchor {full} does not define")

def rust_citable(line):
    """The parts of a Rust line where a rule can be cited: comments and string literals."""
    parts = RUST_STRING.findall(line)
    code = RUST_STRING.sub("\"\"", line)
    if "//" in code:
        parts.append(code[code.index("//"):])
    return " ".join(parts)

references = 0
rules_cited = set()
for path in files:
    base = os.path.dirname(path)
    is_md, is_rs = path.endswith(".md"), path.endswith(".rs")
    try:
        text = open(path, encoding="utf-8").read()
    except UnicodeDecodeError:
        continue
    in_fence = False
    for lineno, line in enumerate(text.splitlines(), 1):
        if is_md and line.lstrip().startswith("```"):
            in_fence = not in_fence
        m = OUTSIDE.search(line)
        if m:
            problem(path, lineno, f"refers outside the repository ({m.group(0)!r})")
        m = ISSUE.search(line)
        if m:
            problem(path, lineno, f"cites an issue tracker the repository does not hold ({m.group(0)!r})")
        taken = []
        if is_md and not in_fence:
            taken += [m.span(1) for m in MD_LINK.finditer(line)]  # checked as links below
        for m in REPO_PATH.finditer(line):
            if any(a <= m.start() < b for a, b in taken):
                continue
            references += 1
            taken.append(m.span())
            check_doc(path, lineno, m.group(1), m.group(2), ".")
        for m in BARE_MD.finditer(line):
            if any(a <= m.start() < b for a, b in taken):
                continue
            name, anchor = m.group(1), m.group(2)
            references += 1
            if os.path.isfile(os.path.join(base, name)):
                check_doc(path, lineno, name, anchor, base)
            elif os.path.isfile(name):
                check_doc(path, lineno, name, anchor, ".")
            else:
                problem(path, lineno, f"cites {name}, which is neither at the root nor next to {path} (name it by its path in the repository)")
        if is_md and not in_fence:
            for m in MD_LINK.finditer(line):
                target = m.group(1)
                if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
                    continue  # http:, https:, mailto:
                references += 1
                file_part, _, anchor = target.partition("#")
                if file_part == "":
                    if anchor not in anchors(path):
                        problem(path, lineno, f"links #{anchor}, an anchor {path} does not define")
                else:
                    check_doc(path, lineno, file_part, anchor, base)
        citable = rust_citable(line) if is_rs else line
        for m in RULE.finditer(citable):
            rules_cited.add(int(m.group(1)))
            if f"t{int(m.group(1))}" not in rule_anchors:
                problem(path, lineno, f"cites rule T{m.group(1)}, which {RULES_DOC} does not define")
        for m in REQ.finditer(citable):
            if m.group(1).lower() not in rule_anchors:
                problem(path, lineno, f"cites {m.group(1)}, which {RULES_DOC} does not define")

if problems:
    print("\n".join(problems))
    print(f"check-docs: {len(problems)} problem(s) in {len(files)} files")
    sys.exit(1)
print(f"check-docs: ok: {len(files)} files, {references} document references, {len(rules_cited)} distinct rules cited, all in the repository")
'
