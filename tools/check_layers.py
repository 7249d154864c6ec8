#!/usr/bin/env python3
"""Check that the core's layers only call downward.

The core's sources live in one folder per layer (core/src/README.md). A
layer may use the layers listed before it in --order and itself, never one
after it. Two checks, both on what really gets built:

  symbols   every object file of libkeel (core/src/<layer>/<file>.c, named
            src_<layer>_<file>.c.o by the build) may reference, undefined,
            only symbols defined by objects of its own or a lower layer;
  includes  every source and private header under core/src/<layer>/
            includes private headers ("<layer>/<name>.h") of its own or a
            lower layer only.

A violation prints "file: uses <symbol|header> of layer X (above Y)" and the
exit status is 1. --selftest runs the checker on a made-up tree with one
violation of each kind and fails unless both are caught.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)


def object_layer(name, layers):
    # src_<layer>_<file>.c.o; a layer's name contains no underscore
    m = re.match(r'src_([a-z]+)_.+\.c\.o$', name)
    return m.group(1) if m and m.group(1) in layers else None


def nm_symbols(path):
    out = subprocess.run(['nm', '-P', path], check=True,
                         capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        sym, kind = parts[0], parts[1]
        if kind == 'U':
            undefined.add(sym)
        elif kind in 'TDBRVWC' or kind in 'GS':
            defined.add(sym)
    return defined, undefined


def check_symbols(objdir, rank):
    problems = []
    objs = {}
    for name in sorted(os.listdir(objdir)):
        layer = object_layer(name, rank)
        if layer:
            objs[name] = (layer,) + nm_symbols(os.path.join(objdir, name))
    if not objs:
        problems.append(f'{objdir}: no layer objects found (src_<layer>_*.c.o)')
        return problems, 0
    where = {}
    for name, (layer, defined, _) in objs.items():
        for sym in defined:
            where[sym] = layer
    for name, (layer, _, undefined) in objs.items():
        for sym in sorted(undefined):
            owner = where.get(sym)
            if owner and rank[owner] > rank[layer]:
                problems.append(f'{name}: uses {sym} of layer {owner} '
                                f'(above {layer})')
    return problems, len(objs)


def check_includes(srcdir, rank):
    problems = []
    files = 0
    for layer in rank:
        d = os.path.join(srcdir, layer)
        if not os.path.isdir(d):
            problems.append(f'{d}: missing layer folder')
            continue
        for name in sorted(os.listdir(d)):
            if not name.endswith(('.c', '.h')):
                continue
            files += 1
            with open(os.path.join(d, name), encoding='utf-8') as f:
                text = f.read()
            for inc in INCLUDE.findall(text):
                if inc not in rank:
                    problems.append(f'{layer}/{name}: includes a header of '
                                    f'"{inc}", which is not a layer')
                elif rank[inc] > rank[layer]:
                    problems.append(f'{layer}/{name}: uses header of layer '
                                    f'{inc} (above {layer})')
    return problems, files


def run(objdir, srcdir, order):
    rank = {layer: i for i, layer in enumerate(order)}
    p1, nobj = check_symbols(objdir, rank)
    p2, nsrc = check_includes(srcdir, rank)
    for p in p1 + p2:
        print(p)
    print(f'layers {" < ".join(order)}: {nobj} objects, {nsrc} sources, '
          f'{len(p1) + len(p2)} upward uses')
    return 1 if p1 or p2 else 0


def selftest():
    cc = os.environ.get('CC', 'cc')
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, 'src')
        obj = os.path.join(tmp, 'obj')
        for d in ('low', 'high'):
            os.makedirs(os.path.join(src, d))
        os.makedirs(obj)
        files = {
            'low/a.c': '#include "high/h.h"\nint high_fn(void);\n'
                       'int low_fn(void) { return high_fn(); }\n',
            'high/b.c': 'int low_fn(void);\n'
                        'int high_fn(void) { return 1; }\n'
                        'int high_other(void) { return low_fn(); }\n',
            'high/h.h': '/* nothing */\n',
        }
        for rel, text in files.items():
            with open(os.path.join(src, rel), 'w') as f:
                f.write(text)
        for rel in ('low/a.c', 'high/b.c'):
            layer, base = rel.split('/')
            subprocess.run([cc, '-c', '-I', src, os.path.join(src, rel), '-o',
                            os.path.join(obj, f'src_{layer}_{base}.o')],
                           check=True)
        rank = {'low': 0, 'high': 1}
        p1, _ = check_symbols(obj, rank)
        p2, _ = check_includes(src, rank)
        ok = (len(p1) == 1 and 'high_fn' in p1[0] and
              len(p2) == 1 and 'low/a.c' in p2[0])
        print('selftest: symbol check found', p1)
        print('selftest: include check found', p2)
        if not ok:
            print('selftest FAILED: the checker missed or invented a violation')
            return 1
        print('selftest passed: both planted violations caught, no others')
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--objdir', help="libkeel's object folder")
    ap.add_argument('--srcdir', help='core/src')
    ap.add_argument('--order', help='layers, lowest first, comma-separated')
    ap.add_argument('--selftest', action='store_true')
    a = ap.parse_args()
    if a.selftest:
        return selftest()
    if not (a.objdir and a.srcdir and a.order):
        ap.error('--objdir, --srcdir and --order are required')
    return run(a.objdir, a.srcdir, a.order.split(','))


if __name__ == '__main__':
    sys.exit(main())
