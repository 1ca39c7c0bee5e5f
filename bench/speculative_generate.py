#!/usr/bin/env python3
"""Speculative decoding at batch 1: `futr generate --json` with
--speculative off and ngram on each workload, interleaved, and the median
decode rate of each (markdown table on stdout, JSON with every run and what
the model wrote).

Workloads (greedy unless --temperature is given; chat template):
  copy      extraction: a WikiText-2 passage (tests/data/wiki_excerpt.txt: the
            article's title and first paragraph, detokenized), and the model is
            asked to copy its first sentences (the answer quotes it)
  code      code editing: a function to rewrite with one change (a variable
            renamed); code_doc: a docstring added; code_hints: type hints added
  free      free generation (nothing to copy): the drafts' overhead

  bench/speculative_generate.py --futr build/bin/futr --reps 3 \\
      --json bench/results/speculative_cpu.json -- --backend cpu --threads 2

  build/bin/futr quantize -o smollm2.futr     # the calibrated INT4 model (GPTQ)
  bench/speculative_generate.py --max-tokens 96 -- --model smollm2.futr --backend gpu

What the model writes decides the code workloads: on the GPU the INT4 model
that `futr quantize` writes copies the function with its one change, the GGUF
quantized on load (RTN) rewrites it more than it copies it (docs/PERF.md).

The copy passage is detokenized (wikitext_detokenize) because the raw
WikiText-2 text carries the tokenization of its source ("film , television",
"guest @-@ starring", "Teddy 's Story", '" Craig "'). Asked to copy such a
passage, the model writes ordinary punctuation ("film, television"), so every
punctuation mark of its answer differs from the prompt and rejects a prompt-
lookup draft there: the workload would measure the artifacts, not copying. A
real extraction request quotes ordinary text, which the answer can then quote
token for token.

Arguments after `--` go to every futr run (model, backend, KV format, ...).
The text of the two modes must be the same (the run fails otherwise): the
tokens of speculative decoding are those of ordinary decoding.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CODE = '''def mean_and_spread(values):
    total = 0.0
    for v in values:
        total += v
    mean = total / len(values)
    spread = 0.0
    for v in values:
        spread += (v - mean) ** 2
    return mean, (spread / len(values)) ** 0.5
'''


def wikitext_detokenize(line):
    """One line of raw WikiText-2 as ordinary text: "= = Title = =" -> "Title";
    " @-@ " " @,@ " " @.@ " (a hyphen, a thousands separator, a decimal point
    inside a word or number) -> "-" "," "."; no space before , . ; : ! ? % ) ]
    nor after ( [ $; clitics joined ("Teddy 's" -> "Teddy's", "do n't" ->
    "don't"); no space inside a pair of double quotes ('" Craig "' -> '"Craig"')."""
    s = line.strip()
    heading = re.fullmatch(r"(?:= )+(.*?)(?: =)+", s)
    if heading:
        s = heading.group(1)
    s = f" {s} "
    for raw, text in ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", ".")):
        s = s.replace(raw, text)
    s = re.sub(r" ([.,;:!?%)\]])", r"\1", s)
    s = re.sub(r"([(\[$]) ", r"\1", s)
    s = re.sub(r" ('s|'re|'ve|'ll|'d|'m|n't)(?=\W)", r"\1", s)
    s = re.sub(r'" ([^"]*?) "', r'"\1"', s)
    return s.strip()


def workloads():
    with open(os.path.join(ROOT, "tests", "data", "wiki_excerpt.txt"), encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    # The article's title and first paragraph (170 words and marks of the raw text).
    passage = "\n\n".join(wikitext_detokenize(line) for line in lines[:2])
    return {
        "copy": f"Here is a passage:\n\n{passage}\n\nCopy the first three sentences of the passage exactly.",
        "code": f"Here is a Python function:\n\n{CODE}\nRewrite it with the variable `total` renamed to `acc`. "
                "Output only the code.",
        "code_doc": f"Here is a Python function:\n\n{CODE}\nAdd a docstring to it and leave its code unchanged. "
                    "Output only the code.",
        "code_hints": f"Here is a Python function:\n\n{CODE}\nAdd type hints to it (values is a list of floats) "
                      "and leave its body unchanged. Output only the code.",
        "free": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    }


def run(futr, prompt, mode, args):
    cmd = [futr, "generate", "--chat", prompt, "--speculative", mode,
           "--max-tokens", str(args.max_tokens), "--temperature", str(args.temperature), "--seed", "1",
           "--json"] + (["--draft-max", str(args.draft_max)] if args.draft_max else []) + args.extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"futr failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    stats = json.loads(p.stderr.strip().splitlines()[-1])
    return p.stdout, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--futr", default=os.path.join(ROOT, "build", "bin", "futr"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--draft-max", type=int, default=0, help="0: futr's default (8; 7 on the GPU engine)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--workloads", default="copy,code,code_doc,code_hints,free")
    ap.add_argument("--json", default="")
    ap.add_argument("extra", nargs="*", help="arguments for every futr run (after --)")
    args = ap.parse_args()
    all_w = workloads()
    rows, runs = [], []
    for name in args.workloads.split(","):
        rates = {"off": [], "ngram": []}
        texts = {}
        last = {}
        for rep in range(args.reps):
            for mode in ("off", "ngram"):  # interleaved: a busy machine slows both alike
                text, stats = run(args.futr, all_w[name], mode, args)
                texts.setdefault(mode, text)
                if text != texts[mode] or (mode == "ngram" and text != texts["off"]):
                    sys.exit(f"{name}: the text differs between runs or modes")
                rates[mode].append(stats["tokens_per_second"])
                last[mode] = stats
                runs.append({"workload": name, "mode": mode, "rep": rep, **stats})
        off, on = statistics.median(rates["off"]), statistics.median(rates["ngram"])
        s = last["ngram"]["speculative"]
        rows.append({"workload": name, "generated": last["ngram"]["generated"], "off_tok_s": off, "ngram_tok_s": on,
                     "speedup": on / off if off > 0 else 0.0, "acceptance": s["acceptance"],
                     "tokens_per_step": s["tokens_per_step"], "drafted": s["drafted"], "accepted": s["accepted"],
                     "text": texts["off"]})  # what the model wrote (both modes: the same text)
    print("| workload | tokens | off tok/s | ngram tok/s | speedup | drafted | accepted | acceptance | tokens/step |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['workload']} | {r['generated']} | {r['off_tok_s']:.1f} | {r['ngram_tok_s']:.1f} | "
              f"{r['speedup']:.2f}x | {r['drafted']} | {r['accepted']} | {100 * r['acceptance']:.0f}% | "
              f"{r['tokens_per_step']:.2f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            meta = dict(vars(args), futr=os.path.relpath(args.futr, ROOT))
            json.dump({"args": meta, "rows": rows, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
