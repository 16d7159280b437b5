#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""File-level call cycles of a C program: the groups of .c files that call each other in a ring.

Every .c file under the given folders is a node; file A -> file B when a function body (or a
macro defined) in A calls a function defined in B and in no other file of the set. The strongly
connected components of that graph are the call cycles. Prints each cycle larger than one file,
largest first, then "largest cycle: N files"; with -v also the calls that hold each cycle
together. With --max N the exit status is 1 if a cycle has more than N files.

The C is read by a small tokenizer (comments, string and character literals and preprocessor
lines understood; no preprocessing): a definition is an identifier followed by a balanced
parameter list and '{' at file scope, a call is an identifier followed by '(' that is not a
keyword and not a member (a->f(), s.f() call through pointers, which this graph cannot follow).

usage: callcycles.py [-v] [--max N] DIR|FILE [DIR|FILE...]
"""
import argparse
import os
import re
import sys

KEYWORDS = {
    "if", "for", "while", "switch", "return", "sizeof", "do", "else", "case", "goto",
    "_Alignof", "alignof", "_Alignas", "_Generic", "_Static_assert", "static_assert",
    "typeof", "__typeof__", "__typeof", "__attribute__", "__attribute", "asm", "__asm__",
    "__asm", "defined", "__builtin_offsetof", "offsetof", "__extension__",
}

TOKEN = re.compile(r"""
    (?P<space>[ \t\r\f\v]+|\\\n)
  | (?P<newline>\n)
  | (?P<comment>/\*.*?\*/|//(?:[^\n\\]|\\.)*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<number>\.?\d(?:[\w.]|[eEpP][+-])*)
  | (?P<punct>->|\.\.\.|[^\s\w])
""", re.S | re.X)


def tokens(text):
    """(kind, value, directive) for each significant token; kind is ident, punct or other.
    directive numbers the preprocessor line a token is on (None outside directives); the
    directive's own name (define, include, ...) is left out."""
    directive = None
    count = 0
    line_start = True
    expect_name = False
    for m in TOKEN.finditer(text):
        kind = m.lastgroup
        value = m.group()
        if kind == "newline":
            directive = None
            line_start = True
            continue
        if kind == "space" or kind == "comment":
            continue
        if line_start and value == "#":
            count += 1
            directive = count
            expect_name = True
            line_start = False
            continue
        line_start = False
        if expect_name:
            expect_name = False
            if kind == "ident":
                yield ("directive", value, directive)
                continue
        yield ("ident" if kind == "ident" else "punct" if kind == "punct" else "other",
               value, directive)


def scan(path):
    """(functions defined, {called name: count}) of one C file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        toks = list(tokens(f.read()))
    defined, calls = set(), {}
    depth = 0       # brace depth outside directives
    in_body = False  # inside a function definition's braces
    # file-scope tokens since the last ';' or '}' at depth 0, to find "name ( ... ) {"
    head = []
    macro = macro_name = False
    for i, (kind, value, directive) in enumerate(toks):
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        is_call = (kind == "ident" and value not in KEYWORDS and nxt is not None
                   and nxt[1] == "(" and nxt[2] == directive
                   and (i == 0 or toks[i - 1][1] not in (".", "->")))
        if directive is not None:
            # a macro body may call functions; its own name (NAME( right after #define) is
            # not a call, and other directives (#if defined(X), #include) call nothing
            if kind == "directive":
                macro = value == "define"
                macro_name = True
            elif macro and is_call and not macro_name:
                calls[value] = calls.get(value, 0) + 1
            else:
                macro_name = False
            continue
        if in_body:
            if value == "{":
                depth += 1
            elif value == "}":
                depth -= 1
                if depth == 0:
                    in_body = False
                    head = []
            elif is_call:
                calls[value] = calls.get(value, 0) + 1
            continue
        if depth > 0:
            # braces at file scope that are not a function: struct/enum/initializer bodies
            if value == "{":
                depth += 1
            elif value == "}":
                depth -= 1
            continue
        if value == ";":
            head = []
        elif value == "{":
            name = definition_name(head)
            depth = 1
            if name:
                defined.add(name)
                in_body = True
            head = []
        else:
            head.append((kind, value))
    return defined, calls


def definition_name(head):
    """The function name if head (file-scope tokens before a '{') ends "name ( ... )",
    attribute lists after the parameters skipped; else None."""
    j = len(head) - 1
    while j >= 0 and head[j][1] == ")":
        level = 0
        while j >= 0:
            if head[j][1] == ")":
                level += 1
            elif head[j][1] == "(":
                level -= 1
                if level == 0:
                    break
            j -= 1
        j -= 1  # the token before the '('
        if j < 0 or head[j][0] != "ident":
            return None
        if head[j][1] in ("__attribute__", "__attribute"):
            j -= 1
            continue
        if head[j][1] in KEYWORDS:
            return None
        return head[j][1]
    return None


def c_files(paths):
    out = []
    for p in paths:
        if os.path.isfile(p):
            out.append(os.path.normpath(p))
            continue
        for root, _, names in os.walk(p):
            out += [os.path.normpath(os.path.join(root, n)) for n in names if n.endswith(".c")]
    return sorted(set(out))


def strongly_connected(nodes, edges):
    """Tarjan's algorithm, iterative; returns the components as sorted lists."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(sorted(comp))
    return comps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", metavar="DIR|FILE")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="list the calls between the files of each cycle")
    ap.add_argument("--max", type=int, metavar="N",
                    help="exit with status 1 if a cycle has more than N files")
    args = ap.parse_args()

    files = c_files(args.paths)
    if not files:
        print("callcycles: no .c files under " + " ".join(args.paths), file=sys.stderr)
        return 2
    scanned = {f: scan(f) for f in files}
    where = {}
    for f, (defined, _) in scanned.items():
        for name in defined:
            where.setdefault(name, set()).add(f)
    home = {name: next(iter(fs)) for name, fs in where.items() if len(fs) == 1}
    edges = {f: {} for f in files}  # edges[a][b] = names a calls in b
    for f, (_, calls) in scanned.items():
        for name in calls:
            g = home.get(name)
            if g is not None and g != f:
                edges[f].setdefault(g, set()).add(name)

    cycles = sorted((c for c in strongly_connected(files, edges) if len(c) > 1),
                    key=lambda c: (-len(c), c))
    for c in cycles:
        print(len(c), " ".join(c))
        if args.verbose:
            members = set(c)
            for a in c:
                for b in sorted(set(edges[a]) & members):
                    print("    %s -> %s: %s" % (a, b, ", ".join(sorted(edges[a][b]))))
    largest = len(cycles[0]) if cycles else 1
    print("largest cycle: %d file%s" % (largest, "" if largest == 1 else "s"))
    if args.max is not None and largest > args.max:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
