#!/usr/bin/env python3
"""Lists functions over 80 lines and files over 600 lines under src/ (the
structure check of issue #40). Run from the repository root:

    python3 scripts/long_code.py [--circles]

A function's length runs from its `fn` line to its closing brace (doc
comments and attributes not counted); functions inside `#[cfg(test)]`
modules and `*_tests.rs` files are not counted. A file is reported with all
its lines and with its production lines (without its inline `#[cfg(test)]`
modules); test files (`*_tests.rs`) are marked. `--circles` also lists the
pairs of top-level modules that import each other (`crate::a` in b and
`crate::b` in a, comments and `*_tests.rs` left out).

Crude by design: a small lexer blanks strings, chars and comments, then
braces are matched; no macro is expanded, and a `fn` inside a macro body is
counted as written.
"""
import os, re, sys

FN_LIMIT, FILE_LIMIT = 80, 600

def strip(src):
    """Blanks out comments, strings and char literals, keeping newlines."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif src.startswith('/*', i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith('/*', j): depth += 1; j += 2
                elif src.startswith('*/', j): depth -= 1; j += 2
                else: j += 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif re.match(r'b?r#*"', src[i:i+40]) and (i == 0 or not (src[i-1].isalnum() or src[i-1] == '_')):
            m = re.match(r'b?r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == '"' or (c == 'b' and src.startswith('b"', i) and (i == 0 or not src[i-1].isalnum())):
            j = i + (2 if c == 'b' else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            j += 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == "'":
            m = re.match(r"'(\\(x..|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", src[i:])
            if m:
                out.append(' ' * m.end()); i += m.end()
            else:
                out.append(c); i += 1  # a lifetime
        else:
            out.append(c); i += 1
    return ''.join(out)

def block_end(lines, i):
    """The line index of the brace closing the first block opened at or after line i."""
    depth, started = 0, False
    for j in range(i, len(lines)):
        for ch in lines[j]:
            if ch == '{': depth += 1; started = True
            elif ch == '}': depth -= 1
        if started and depth == 0:
            return j
        if not started and lines[j].rstrip().endswith(';'):
            return None
    return None

def scan(path):
    lines = strip(open(path, encoding='utf-8').read()).split('\n')
    tests = set()
    fns = []
    i = 0
    while i < len(lines):
        if re.match(r'\s*#\[cfg\(test\)\]', lines[i]):
            j = i + 1
            while j < len(lines) and re.match(r'\s*(#\[|$)', lines[j]): j += 1
            if j < len(lines) and re.match(r'\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{', lines[j]):
                end = block_end(lines, j)
                if end is not None:
                    tests.update(range(i, end + 1)); i = end + 1; continue
            elif j < len(lines) and re.match(r'\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*;', lines[j]):
                tests.update(range(i, j + 1))
        i += 1
    test_file = path.endswith('_tests.rs')
    for i, l in enumerate(lines):
        m = re.match(r'\s*(pub(\([^)]*\))?\s+)?((const|async|unsafe|extern\s+"\w+")\s+)*fn\s+(\w+)', l)
        if m and i not in tests and not test_file:
            end = block_end(lines, i)
            if end is not None:
                fns.append((end - i + 1, m.group(5), i + 1))
    return len(lines) - 1 if lines[-1] == '' else len(lines), len(lines) - len(tests) - (1 if lines[-1] == '' else 0), fns

def main(*args):
    circles = '--circles' in args
    root = next((a for a in args if not a.startswith('--')), 'src')
    long_fns, long_files = [], []
    for d, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith('.rs'): continue
            p = os.path.join(d, f)
            total, prod, fns = scan(p)
            long_fns += [(n, p, name, line) for n, name, line in fns if n > FN_LIMIT]
            if total > FILE_LIMIT:
                long_files.append((total, prod, p))
    print(f'functions over {FN_LIMIT} lines (outside tests):')
    for n, p, name, line in sorted(long_fns, reverse=True):
        print(f'  {n:5} {p}:{line} {name}')
    print(f'files over {FILE_LIMIT} lines (all lines / without inline test modules):')
    for total, prod, p in sorted(long_files, reverse=True):
        print(f'  {total:5} {prod:5} {p}' + ('  (tests)' if p.endswith('_tests.rs') else ''))
    if circles:
        print('import circles between top-level modules:')
        for a, b, ab, ba in import_circles(root):
            print(f'  {a} <-> {b}: {a} -> {b} in {", ".join(ab)}; {b} -> {a} in {", ".join(ba)}')
    return 0

def import_circles(root):
    """(a, b, files of a naming b, files of b naming a) for each pair of
    top-level modules that name each other through `crate::`."""
    where = {}
    for d, _, files in os.walk(root):
        for f in files:
            if not f.endswith('.rs') or f.endswith('_tests.rs'):
                continue
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root)
            top = rel.split(os.sep)[0].removesuffix('.rs')
            lines = strip(open(p, encoding='utf-8').read()).split('\n')
            for m in re.finditer(r'crate::(\w+)', '\n'.join(lines)):
                if m.group(1) != top:
                    where.setdefault((top, m.group(1)), set()).add(rel)
    return [(a, b, sorted(where[(a, b)]), sorted(where[(b, a)]))
            for (a, b) in sorted(where) if a < b and (b, a) in where]

if __name__ == '__main__':
    sys.exit(main(*sys.argv[1:]))
