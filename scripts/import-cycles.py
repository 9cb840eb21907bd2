#!/usr/bin/env python3
"""Import cycles among the modules of src/ (test code excluded unless --with-tests).

Resolves every path a file names (`use` trees, `crate::`/`super::`/`self::` paths, paths through
imported names or child modules) to the file that *defines* the item, following re-exports
(`pub use`), so a facade `mod.rs` that only re-exports a sibling's type is not mistaken for the
owner of that type. By default code under a cfg that is false without `test` (`#[cfg(test)]`,
`#[cfg(all(test, ..))]`) is skipped, as are modules declared under such a cfg.

usage: scripts/import-cycles.py [1|2|all] [-v] [--with-tests] [--reexports] [--root DIR]
  1    strongly connected components of the top-level module graph
  2    also the components among the entries of every folder (src/X/*.rs and src/X/*/,
       collapsed, plus the folder's mod.rs)
  -v   print the references that make up each component's edges
  --with-tests  also the test code: `test` is left undecided, like a cargo feature, so code
       under `#[cfg(test)]` and under `#[cfg(not(test))]` both count. The graph is then a
       superset of the default one: a run with it also finds every cycle of a run without.
  --reexports  count a module-level `use`/`pub use` as a dependency even where no code names
       it (by default a re-export is the folder's interface, not a dependency of its code)
  --root DIR  the crate's source folder (default src; e.g. crates/testkit/src)

CI (scripts/test.sh) runs `all --with-tests` on src/ and on crates/testkit/src.
"""
import os
import re
import sys

ROOT = 'src'

# ---------------------------------------------------------------- lexing

TOK = re.compile(r'''
    (?P<ws>\s+)
  | (?P<lc>//[^\n]*)
  | (?P<bc>/\*)
  | (?P<raw>b?r\#*")
  | (?P<str>b?"(?:\\.|[^"\\])*")
  | (?P<chr>b?'(?:\\.|[^'\\])'|b?'\\u\{[0-9a-fA-F]+\}')
  | (?P<life>'[A-Za-z_][A-Za-z0-9_]*)
  | (?P<id>r\#[A-Za-z_][A-Za-z0-9_]*|[A-Za-z_][A-Za-z0-9_]*)
  | (?P<num>[0-9][0-9A-Za-z_.]*)
  | (?P<pp>::)
  | (?P<p>.)
''', re.X | re.S)


def lex(src):
    out = []
    i = 0
    line = 1
    n = len(src)
    while i < n:
        m = TOK.match(src, i)
        kind = m.lastgroup
        text = m.group(kind)
        if kind == 'bc':
            depth = 1
            j = i + 2
            while j < n and depth:
                if src.startswith('/*', j):
                    depth += 1
                    j += 2
                elif src.startswith('*/', j):
                    depth -= 1
                    j += 2
                else:
                    j += 1
            line += src.count('\n', i, j)
            i = j
            continue
        if kind == 'raw':
            hashes = text.count('#')
            end = src.index('"' + '#' * hashes, m.end())
            j = end + 1 + hashes
            line += src.count('\n', i, j)
            out.append(('str', '', line))
            i = j
            continue
        if kind not in ('ws', 'lc'):
            out.append((kind, text, line))
        line += text.count('\n')
        i = m.end()
    return out


# ---------------------------------------------------------------- cfg evaluation

def cfg_value(toks, k):
    """Evaluate the cfg predicate starting at toks[k]; returns (value, next index).
    value: True, False or None (unknown). `test` is false (unknown with --with-tests); features
    are unknown."""
    kind, text, _ = toks[k]
    if text in ('all', 'any', 'not') and toks[k + 1][1] == '(':
        k += 2
        vals = []
        while toks[k][1] != ')':
            v, k = cfg_value(toks, k)
            vals.append(v)
            if toks[k][1] == ',':
                k += 1
        k += 1
        if text == 'not':
            v = vals[0]
            return (None if v is None else not v), k
        if text == 'all':
            if False in vals:
                return False, k
            return (True if all(v is True for v in vals) else None), k
        if True in vals:
            return True, k
        return (False if all(v is False for v in vals) else None), k
    k += 1
    if toks[k][1] == '=':
        k += 2
        return None, k
    if text == 'test':
        return TEST, k
    if text == 'unix':
        return True, k
    return None, k


# ---------------------------------------------------------------- parsing

class Module:
    def __init__(self, path, file):
        self.path = path          # tuple of segments
        self.file = file          # file that holds it
        self.children = {}        # name -> Module
        self.items = set()        # names defined here
        self.imports = {}         # name -> (abs-or-rel path list, line, scope module)
        self.globs = []           # paths
        self.refs = []            # (path list, line)
        self.bare = []            # (identifier, line): names used without a path


modules = {}
REEXPORTS = '--reexports' in sys.argv
# The value of the `test` cfg: false (test code skipped), or unknown with --with-tests (code
# under `cfg(test)` and under `cfg(not(test))` both kept: only what is false either way is
# skipped).
TEST = None if '--with-tests' in sys.argv else False


def skip_balanced(toks, k):
    """toks[k] is an opening bracket; return index after its match."""
    pairs = {'(': ')', '[': ']', '{': '}'}
    stack = [pairs[toks[k][1]]]
    k += 1
    while stack:
        t = toks[k][1]
        if toks[k][0] == 'p':
            if t in pairs:
                stack.append(pairs[t])
            elif t == stack[-1]:
                stack.pop()
        k += 1
    return k


def skip_item(toks, k):
    """Skip one item starting at k (after its attributes)."""
    while k < len(toks):
        t = toks[k]
        if t[0] == 'p' and t[1] == ';':
            return k + 1
        if t[0] == 'p' and t[1] == '{':
            return skip_balanced(toks, k)
        if t[0] == 'p' and t[1] in '([':
            k = skip_balanced(toks, k)
            continue
        if t[0] == 'p' and t[1] == '}':
            return k
        k += 1
    return k


def parse_use_tree(toks, k, prefix, out):
    """Parse a use tree at k; append (path, alias) to out; return next index."""
    path = list(prefix)
    while True:
        t = toks[k]
        if t[1] == '{':
            k += 1
            while toks[k][1] != '}':
                k = parse_use_tree(toks, k, path, out)
                if toks[k][1] == ',':
                    k += 1
            return k + 1
        if t[1] == '*':
            out.append((path, '*'))
            return k + 1
        if t[0] == 'id':
            path.append(t[1])
            k += 1
            if toks[k][0] == 'pp':
                k += 1
                continue
            alias = path[-1]
            if toks[k][1] == 'as':
                alias = toks[k + 1][1]
                k += 2
            if alias == 'self':
                alias = path[-2]
                path = path[:-1]
            out.append((path, alias))
            return k
        if t[0] == 'pp':
            k += 1
            continue
        return k + 1


ITEM_KW = {'struct', 'enum', 'fn', 'trait', 'type', 'const', 'static', 'union'}


def parse_file(file, modpath):
    src = open(file).read()
    toks = lex(src)
    toks.append(('p', '}', 0))
    root = Module(modpath, file)
    modules[modpath] = root
    parse_block(toks, 0, root, file, top=True)
    return root


def parse_block(toks, k, mod, file, top=False):
    pending_path_attr = None
    brace_depth = 0
    while k < len(toks):
        kind, text, line = toks[k]
        if kind == 'p' and text == '#':
            j = k + 1
            inner = toks[j][1] == '!'
            if inner:
                j += 1
            end = skip_balanced(toks, j)
            attr = toks[j + 1:end - 1]
            if not inner and attr and attr[0][1] == 'cfg':
                v, _ = cfg_value(attr, 2)
                if v is False:
                    k = skip_item(toks, end)
                    # skip any further attributes belonging to it? they came before.
                    continue
            if not inner and attr and attr[0][1] == 'path':
                pending_path_attr = attr[2][1].strip('"') if attr[2][0] == 'str' else None
                # string contents dropped by lexer for raw; normal strings kept
                pending_path_attr = toks[j + 3][1].strip('"') if len(attr) > 2 else None
            if attr and attr[0][1] in ('cfg', 'path', 'doc', 'cfg_attr'):
                k = end
            else:
                k = j + 1   # paths inside other attributes (`#[error(..)]`, serde's `with`) count
            continue
        if kind == 'p' and text == '{':
            brace_depth += 1
            k += 1
            continue
        if kind == 'p' and text == '}':
            if brace_depth == 0:
                return k + 1
            brace_depth -= 1
            k += 1
            continue
        if kind == 'id' and text == 'mod' and toks[k + 1][0] == 'id' and brace_depth == 0:
            name = toks[k + 1][1]
            nxt = toks[k + 2][1]
            if nxt == ';':
                child_file = child_module_file(file, mod, name, pending_path_attr)
                pending_path_attr = None
                if child_file:
                    child = parse_file(child_file, mod.path + (name,))
                    mod.children[name] = child
                    mod.items.add(name)
                k += 3
                continue
            if nxt == '{':
                child = Module(mod.path + (name,), file)
                child.inline = True
                modules[child.path] = child
                mod.children[name] = child
                mod.items.add(name)
                k = parse_block(toks, k + 3, child, file)
                continue
        pending_path_attr = None
        if kind == 'id' and text == 'use' and brace_depth == 0:
            # A module-level `use` is not a dependency by itself: a re-export (`pub use`) is the
            # folder's interface, and a private import counts where the code names it.
            out = []
            k = parse_use_tree(toks, k + 1, [], out)
            for path, alias in out:
                if alias == '*':
                    mod.globs.append((path, line))
                elif alias != '_':
                    mod.imports[alias] = (path, line)
                else:
                    mod.refs.append((path, line))
                if REEXPORTS:
                    mod.refs.append((path, line))
            continue
        if kind == 'id' and text == 'use':
            # function-local use: a reference from this module
            out = []
            k = parse_use_tree(toks, k + 1, [], out)
            for path, alias in out:
                if alias == '*':
                    mod.refs.append((path, line))
                else:
                    mod.refs.append((path, line))
            continue
        if kind == 'id' and brace_depth == 0 and text in ITEM_KW and toks[k + 1][0] == 'id':
            mod.items.add(toks[k + 1][1])
        if kind == 'id' and text == 'macro_rules' and toks[k + 1][1] == '!':
            mod.items.add(toks[k + 2][1] + '!')
        if kind == 'id' and toks[k + 1][0] == 'pp' and (k == 0 or toks[k - 1][0] != 'pp'):
            path = [text]
            j = k + 1
            while toks[j][0] == 'pp' and toks[j + 1][0] == 'id':
                path.append(toks[j + 1][1])
                j += 2
            mod.refs.append((path, line))
            k = j
            continue
        if kind == 'id' and (k == 0 or toks[k - 1][1] not in ('::', '.')):
            mod.bare.append((text, line))
        k += 1
    return k


def child_module_file(file, mod, name, path_attr):
    d = os.path.dirname(file)
    base = os.path.basename(file)
    if path_attr:
        # relative to the directory of a non-mod.rs file's own dir? (rustc: dir of file for mod.rs
        # / lib.rs, else file's dir) - good enough for this crate.
        p = os.path.join(d, path_attr)
        return p if os.path.exists(p) else None
    if base not in ('mod.rs', 'lib.rs', 'main.rs'):
        d = os.path.join(d, base[:-3])
    for cand in (os.path.join(d, name + '.rs'), os.path.join(d, name, 'mod.rs')):
        if os.path.exists(cand):
            return cand
    return None


# ---------------------------------------------------------------- resolution

def lookup(mod, name, seen):
    """Resolve `name` in module `mod`; returns ('mod', Module) or ('item', Module) or None."""
    key = (mod.path, name)
    if key in seen:
        return None
    seen = seen | {key}
    if name in mod.children:
        return ('mod', mod.children[name])
    if name in mod.imports:
        path, _ = mod.imports[name]
        r = resolve(mod, path, seen)
        if r:
            return r
    if name in mod.items:
        return ('item', mod)
    for path, _ in mod.globs:
        r = resolve(mod, path, seen)
        if r and r[0] == 'mod':
            got = lookup(r[1], name, seen)
            if got:
                return got
    return None


def resolve(mod, path, seen=frozenset()):
    """Resolve a path named in `mod` to ('mod', M) or ('item', M-defining) or None (external)."""
    if not path:
        return None
    first = path[0]
    if first == 'crate':
        cur = modules[()]
        rest = path[1:]
    elif first == 'super':
        cur = mod
        rest = path
        while rest and rest[0] == 'super':
            cur = modules[cur.path[:-1]]
            rest = rest[1:]
    elif first == 'self':
        cur = mod
        rest = path[1:]
    elif first in ('Self',):
        return None
    else:
        r = lookup(mod, first, seen)
        if r is None:
            return None
        if r[0] == 'item':
            return r
        cur = r[1]
        rest = path[1:]
    for seg in rest:
        r = lookup(cur, seg, seen)
        if r is None:
            return ('item', cur)   # an item we did not record (e.g. generated); owner = cur
        if r[0] == 'item':
            return r
        cur = r[1]
    return ('mod', cur)


def file_of(m):
    return m.file


# ---------------------------------------------------------------- graph

def modpath_of_file(f):
    rel = os.path.relpath(f, ROOT)[:-3]
    parts = rel.split('/')
    if parts[-1] == 'mod':
        parts = parts[:-1]
    if parts == ['lib']:
        return ()
    return tuple(parts)


def build():
    parse_file(os.path.join(ROOT, 'lib.rs'), ())
    refs = []   # (from file, to file, line)
    for m in list(modules.values()):
        for path, line in m.refs:
            r = resolve(m, path)
            if r is None:
                continue
            target = r[1]
            if target.file != m.file:
                refs.append((m.file, target.file, line))
        for name, line in m.bare:
            if name in m.items:
                continue
            r = lookup(m, name, frozenset()) if (name in m.imports or m.globs) else None
            if r is None:
                continue
            target = r[1]
            if target.file != m.file:
                refs.append((m.file, target.file, line))
    return refs


def scc(nodes, edges):
    idx, low, st, on, res = {}, {}, [], set(), []
    c = [0]
    sys.setrecursionlimit(100000)

    def go(v):
        idx[v] = low[v] = c[0]
        c[0] += 1
        st.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in idx:
                go(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            comp = []
            while True:
                w = st.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                res.append(sorted(comp))
    for v in sorted(nodes):
        if v not in idx:
            go(v)
    return res


def report(title, refs, key, verbose):
    """key(file) -> node name or None (outside this graph)."""
    edges, why = {}, {}
    nodes = set()
    for a, b, line in refs:
        ka, kb = key(a), key(b)
        if ka is None or kb is None or ka == kb:
            continue
        nodes |= {ka, kb}
        edges.setdefault(ka, set()).add(kb)
        why.setdefault((ka, kb), []).append(f'{a}:{line} -> {b}')
    comps = scc(nodes, edges)
    for comp in comps:
        print(f'{title}{comp}')
        if verbose:
            for (ka, kb), w in sorted(why.items()):
                if ka in comp and kb in comp:
                    print(f'    {ka} -> {kb}: ' + '; '.join(sorted(set(w))[:4])
                          + (' ...' if len(set(w)) > 4 else ''))
    return comps


def main():
    global ROOT
    args = sys.argv[1:]
    verbose = '-v' in args
    if '--root' in args:
        i = args.index('--root')
        if i + 1 >= len(args):
            print('--root needs a folder', file=sys.stderr)
            return 2
        ROOT = args[i + 1].rstrip('/')
        del args[i:i + 2]
    unknown = [a for a in args if a.startswith('-') and a not in ('-v', '--with-tests', '--reexports')]
    args = [a for a in args if not a.startswith('-')]
    if unknown or len(args) > 1 or (args and args[0] not in ('1', '2', 'all')):
        print(__doc__, file=sys.stderr)
        return 2
    if not os.path.exists(os.path.join(ROOT, 'lib.rs')):
        print(f'{ROOT}/lib.rs not found', file=sys.stderr)
        return 2
    level = args[0] if args else '1'
    refs = build()
    files = {m.file for m in modules.values()}

    def top(f):
        p = modpath_of_file(f)
        return p[0] if p else None
    n = len(report('', refs, top, verbose))
    if level in ('2', 'all'):
        folders = sorted({os.path.dirname(f) for f in files if os.path.dirname(f) != ROOT})
        for d in folders:
            def key(f, d=d):
                if not f.startswith(d + '/'):
                    return None
                rest = f[len(d) + 1:]
                head = rest.split('/')[0]
                if head.endswith('.rs'):
                    head = head[:-3]
                return head
            n += len(report(d + ': ', refs, key, verbose))
    if n == 0:
        print('no cycles')
    return 1 if n else 0


if __name__ == '__main__':
    sys.exit(main())
