#!/usr/bin/env python3
# Prints the cross-domain table of docs/ACCURACY.md from the JSON results:
#   scripts/crossdomain_table.py [DIR]   (default bench/results/accuracy_smollm2_crossdomain)
import json, os, sys
D = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', 'bench', 'results', 'accuracy_smollm2_crossdomain')
def load(n):
    p = os.path.join(D, n + '.json')
    if not os.path.exists(p) or os.path.getsize(p) == 0: return None
    return json.load(open(p))
base = {t: load(f'bf16_{t}') for t in ('wiki', 'kjv')}
rtn = {t: load(f'rtn_on_{t}') for t in ('wiki', 'kjv')}
name = {'wiki': 'WikiText', 'kjv': 'KJV'}
recipes = [('INT4 GPTQ (act-order)', 'gptq_ao'), ('INT4 GPTQ + clip (act-order)', 'gptqclip_ao'), ('INT4 clip-act', 'clipact')]
print('| weights | calibrated on | evaluated on | ppl | Δ ppl vs BF16 | share of RTN\'s loss | Δ NLL ± SE (share of RTN\'s) | KL (top-32 + rest) | top-1 agreement | domain |')
print('|---|---|---|---|---|---|---|---|---|---|')
for t in ('wiki', 'kjv'):
    b = base[t]; print(f"| BF16 | - | {name[t]} | {b['ppl']:.3f} | (baseline) | | | 0 | 100% | |")
for t in ('wiki', 'kjv'):
    r = rtn[t]
    if r: print(f"| INT4 RTN | - | {name[t]} | {r['ppl']:.3f} | +{r['ppl']-base[t]['ppl']:.3f} | 100% | {r['nll_delta']:+.4f} ± {r['nll_delta_stderr']:.4f} | {r.get('kl_mean',0):.4f} | {100*r.get('top1_agreement',0):.1f}% | |")
summary = []
for label, key in recipes:
    cells = {}
    for c in ('wiki', 'kjv'):
        for t in ('wiki', 'kjv'):
            d = load(f'{key}_{c}_on_{t}')
            if not d or not rtn[t]: continue
            loss = d['ppl'] - base[t]['ppl']; rl = rtn[t]['ppl'] - base[t]['ppl']
            cells[(c, t)] = loss / rl
            print(f"| {label} | {name[c]} | {name[t]} | {d['ppl']:.3f} | {loss:+.3f} | **{100*loss/rl:.0f}%** | {d['nll_delta']:+.4f} ± {d['nll_delta_stderr']:.4f} ({100*d['nll_delta']/rtn[t]['nll_delta']:.0f}%) | {d.get('kl_mean',0):.4f} | {100*d.get('top1_agreement',0):.1f}% | {'in' if c==t else 'cross'} |")
    summary.append((label, cells))
print()
for label, cells in summary:
    print(label, {f'{c}->{t}': f'{100*v:.0f}%' for (c, t), v in cells.items()})
