#!/usr/bin/env python3
"""Checks that every test the documents cite exists (run by scripts/test.sh).

Documents: README.md and docs/*.md. A citation is
  * `path.rs::name` (e.g. `tests/server/failures.rs::permission_denied_is_fast...`): the file
    must exist and define `fn name`;
  * `module::path::name` whose last part looks like a test name (four or more words joined by
    `_`): some Rust file of the repository must define `fn name`;
  * a bare backticked name of five or more words joined by `_` (how documents cite a test in
    the same sentence as its file): some Rust file must define `fn name`, unless it is one of
    the few names of other projects' APIs listed in NOT_OURS, or a metric (`nats_roles_…`).

  * a backticked path of the repository (`tests/…`, `src/…`, `crates/…`, `examples/…`,
    `benches/…`, `scripts/…`): it must exist (`examples/<name>` may name an example).

Exit 0 when every citation resolves, 1 with one line per missing one.

    python3 scripts/doc-citations.py [FILE.md ...]
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RUST_DIRS = ["src", "tests", "crates", "examples", "benches"]
# Backticked names of five or more words that are not this project's functions.
NOT_OURS = {
    "get_last_raw_message_by_subject",  # async-nats
}

PATH_CITE = re.compile(r"`?((?:[\w.-]+/)*[\w.-]+\.rs)::(\w+)")
MODULE_CITE = re.compile(r"`((?:\w+::)+)(\w+)`")
BARE = re.compile(r"`(\w+)`")
PATH = re.compile(r"`((?:tests|src|crates|examples|benches|scripts)/[\w./-]*)`")


def words(name: str) -> int:
    return len([w for w in name.split("_") if w])


def defined(name: str, files) -> bool:
    pattern = re.compile(r"\bfn\s+" + re.escape(name) + r"\b")
    return any(pattern.search(text) for text in files)


def main(argv) -> int:
    docs = [pathlib.Path(a) for a in argv] or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    sources = {}
    for d in RUST_DIRS:
        for p in (ROOT / d).rglob("*.rs"):
            if "target" in p.parts:
                continue
            sources[p] = p.read_text(encoding="utf-8", errors="replace")
    all_sources = list(sources.values())
    missing = []
    checked = 0
    for doc in docs:
        text = doc.read_text(encoding="utf-8")
        rel = doc.resolve().relative_to(ROOT)
        for lineno, line in enumerate(text.splitlines(), 1):
            seen = set()
            for m in PATH_CITE.finditer(line):
                path, name = m.group(1), m.group(2)
                seen.add(name)
                checked += 1
                file = ROOT / path
                if not file.exists():
                    missing.append(f"{rel}:{lineno}: {path}::{name}: no file {path}")
                elif not defined(name, [sources.get(file, file.read_text(encoding="utf-8"))]):
                    missing.append(f"{rel}:{lineno}: {path}::{name}: {path} defines no fn {name}")
            for m in MODULE_CITE.finditer(line):
                name = m.group(2)
                if name in seen or words(name) < 4 or m.group(1).endswith(".rs::"):
                    continue
                seen.add(name)
                checked += 1
                if not defined(name, all_sources):
                    missing.append(f"{rel}:{lineno}: {m.group(1)}{name}: no fn {name} in the repository")
            for m in PATH.finditer(line):
                path = m.group(1)
                checked += 1
                file = ROOT / path
                example = path.startswith("examples/") and (ROOT / (path + ".rs")).exists()
                if not file.exists() and not example:
                    missing.append(f"{rel}:{lineno}: {path}: no such file or directory")
            for m in BARE.finditer(line):
                name = m.group(1)
                if (
                    name in seen
                    or words(name) < 5
                    or name in NOT_OURS
                    or name.startswith("nats_roles_")
                    or not name.islower()
                ):
                    continue
                checked += 1
                if not defined(name, all_sources):
                    missing.append(f"{rel}:{lineno}: `{name}`: no fn {name} in the repository")
    for line in missing:
        print(line)
    print(f"doc-citations: {checked} citations checked, {len(missing)} missing", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
