#!/usr/bin/env python3
"""Runs the accuracy matrix of docs/ACCURACY.md and prints its table.

Every weight format x KV-cache format of the quantized CPU reference on the
default model, each compared with one saved BF16 base run (futr perplexity
--kl-base): perplexity, delta, coarsened KL and top-1 agreement.

  scripts/accuracy.py --out /tmp/acc --jobs 2             # run what is missing, print
  scripts/accuracy.py --out bench/results/accuracy_smollm2 --table-only

Each run writes NAME.json (futr's --json output) and NAME.log into --out; a
run whose JSON already exists is skipped, so an interrupted matrix resumes.
Runs use one thread each and --jobs of them run at once. One run of the
default 65,536 tokens takes 5-17 minutes on one core.
"""
import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Quantized model files: name -> futr quantize arguments.
MODELS = {
    'gptq': ['--weights', 'int4', '--quant', 'gptq', '--act-order'],
    'gptqclip': ['--weights', 'int4', '--quant', 'gptq-clip', '--act-order'],
    'clipact': ['--weights', 'int4', '--quant', 'clip-act'],
    'fp8': ['--weights', 'fp8'],
}

# Table rows: label, run-name prefix, weight arguments.
WEIGHTS = [
    ('BF16', 'bf16', ['--weights', 'bf16']),
    ('FP8 prefill path', 'fp8', ['-m', '{out}/fp8.futr']),
    ('INT4 RTN', 'rtn', ['--weights', 'int4', '--quant', 'rtn']),
    ('INT4 GPTQ', 'gptq', ['-m', '{out}/gptq.futr']),
    ('INT4 RTN + clip (MSE)', 'clip', ['--weights', 'int4', '--quant', 'clip']),
    ('INT4 RTN + clip (act)', 'clipact', ['-m', '{out}/clipact.futr']),
    ('INT4 GPTQ + clip', 'gptqclip', ['-m', '{out}/gptqclip.futr']),
]
KVS = [('bf16', 'kvbf16', ['--kv', 'bf16']), ('int4', 'kvint4', ['--kv', 'int4']),
       ('int4-rot', 'kvrot', ['--kv', 'int4-rot', '--kv-block', '64'])]
# Extra rows: name, label, arguments.
EXTRA = [
    ('kv_rot16', 'BF16 + rotated INT4 KV, Hadamard block 16', ['--weights', 'bf16', '--kv', 'int4-rot', '--kv-block', '16']),
    ('kv_rot32', 'BF16 + rotated INT4 KV, Hadamard block 32', ['--weights', 'bf16', '--kv', 'int4-rot', '--kv-block', '32']),
    ('fp32', 'FP32 reference (unquantized)', []),
    ('fp8rc_kvbf16', 'FP8, policy recompute (KV bf16)', ['-m', '{out}/fp8.futr', '--kv', 'bf16', '--fp8-policy', 'recompute']),
    ('fp8cast_kvbf16', 'FP8, 1/rms before the cast (KV bf16)', ['-m', '{out}/fp8.futr', '--kv', 'bf16', '--fp8-rms', 'cast']),
]
# Earlier runs named a few cells differently; read those names too.
ALIASES = {'bf16_kvint4': 'kv_int4', 'bf16_kvrot': 'kv_rot64'}


def load(out, name):
    for n in (name, ALIASES.get(name, '')):
        p = os.path.join(out, n + '.json')
        if n and os.path.exists(p) and os.path.getsize(p) > 0:
            try:
                with open(p) as f:
                    return json.load(f)
            except json.JSONDecodeError:
                return None
    return None


def run(cmd, out, name):
    with open(os.path.join(out, name + '.json'), 'w') as o, open(os.path.join(out, name + '.log'), 'w') as e:
        rc = subprocess.call(cmd, stdout=o, stderr=e)
    if rc != 0:
        os.remove(os.path.join(out, name + '.json'))
        print(f'{name}: futr exited {rc}; see {out}/{name}.log', file=sys.stderr)
    return rc


def run_matrix(a):
    os.makedirs(a.out, exist_ok=True)
    common = ['--ctx', str(a.ctx), '--max-tokens', str(a.max_tokens), '--json', '-q', '-t', '1']
    base = os.path.join(a.out, 'base_bf16.klb')
    if load(a.out, 'bf16_kvbf16') is None or not os.path.exists(base):
        run([a.futr, 'perplexity', *common, '--weights', 'bf16', '--kv', 'bf16', '--save-kl-base', base],
            a.out, 'bf16_kvbf16')
    with cf.ThreadPoolExecutor(a.jobs) as pool:
        jobs = [pool.submit(run, [a.futr, 'quantize', '-q', '-t', '1', '-o', os.path.join(a.out, m + '.futr'), *q],
                            a.out, 'q_' + m)
                for m, q in MODELS.items() if not os.path.exists(os.path.join(a.out, m + '.futr'))]
        cf.wait(jobs)
        todo = []
        for _, w, wargs in WEIGHTS:
            for _, k, kargs in KVS:
                todo.append((f'{w}_{k}', wargs + kargs))
        todo += [(n, args) for n, _, args in EXTRA]
        jobs = []
        for name, args in todo:
            if name == 'bf16_kvbf16' or load(a.out, name) is not None:
                continue
            args = [x.format(out=a.out) for x in args]
            jobs.append(pool.submit(run, [a.futr, 'perplexity', *common, '--kl-base', base, *args], a.out, name))
        cf.wait(jobs)


def table(out):
    b = load(out, 'bf16_kvbf16')
    if b is None:
        sys.exit(f'{out}: no bf16_kvbf16.json (the base run)')
    B = b['ppl']
    lines = ['| weights | KV cache | ppl | delta ppl vs BF16 | KL (top-32 + rest) | top-1 agreement | notes |',
             '|---|---|---|---|---|---|---|']
    delta = {}

    def cells(j):
        d = j['ppl'] - B
        note = ''
        if 'fp8' in j:
            note = f"FP8: {j['fp8']['saturated_calls']} of {j['fp8']['calls']} calls saturated"
        return d, f"{j['ppl']:.3f} | {d:+.3f} ({100 * d / B:+.1f}%) | {j.get('kl_mean', 0):.4f} | " \
                  f"{100 * j.get('top1_agreement', 1):.1f}% | {note}"

    for label, w, _ in WEIGHTS:
        for kv, k, _ in KVS:
            name = f'{w}_{k}'
            if name == 'bf16_kvbf16':
                lines.append(f'| {label} | {kv} | {B:.3f} | (baseline) | 0 | 100% | |')
                delta[name] = 0.0
                continue
            j = load(out, name)
            if j is None:
                lines.append(f'| {label} | {kv} | (not run) | | | | |')
                continue
            delta[name], c = cells(j)
            lines.append(f'| {label} | {kv} | {c} |')
    lines += ['', '| configuration | ppl | delta ppl vs BF16 | KL | top-1 agreement | notes |', '|---|---|---|---|---|---|']
    for name, label, _ in EXTRA:
        j = load(out, name)
        lines.append(f'| {label} | ' + (cells(j)[1] if j else '(not run) | | | |') + ' |')
    lines.append('')
    r = delta.get('rtn_kvbf16')
    for w in ('gptq', 'gptqclip', 'clipact', 'clip'):
        if r and f'{w}_kvbf16' in delta:
            lines.append(f"- {w}: loses {100 * delta[w + '_kvbf16'] / r:.0f}% of what RTN loses (KV bf16; target for GPTQ: <= 60%)")
    for label, w, _ in WEIGHTS:
        a, i, rot = (delta.get(f'{w}_{k}') for k in ('kvbf16', 'kvint4', 'kvrot'))
        if None not in (a, i, rot):
            lines.append(f'- {label}: the INT4 cache adds {i - a:+.3f}, the rotated one {rot - a:+.3f} '
                         f'= {100 * (rot - a) / (i - a):.0f}% (target: <= 50%)')
    print('\n'.join(lines))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--futr', default=os.path.join(ROOT, 'build', 'bin', 'futr'))
    p.add_argument('--out', required=True, help='directory for the JSON results and model files')
    p.add_argument('--jobs', type=int, default=max(1, (os.cpu_count() or 2)))
    p.add_argument('--ctx', type=int, default=1024)
    p.add_argument('--max-tokens', type=int, default=65536, help='tokens of the text to evaluate (0: the full text)')
    p.add_argument('--table-only', action='store_true', help='only print the table of what --out holds')
    a = p.parse_args()
    if not a.table_only:
        run_matrix(a)
    table(a.out)


if __name__ == '__main__':
    main()
