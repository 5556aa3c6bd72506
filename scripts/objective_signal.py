"""How different is each objective's update from SFT's, on the same batches and the same model?

    .venv/bin/python scripts/objective_signal.py [--batches 4] [--methods sft cuset ...]
        [--knobs '{"region_threshold": 0.5}']

For the first ``--batches`` micro-batches of the comparison's training data (seeded order, 2
records each, as `--size small` trains) this runs the bundled SmolLM2-135M with a fresh LoRA
adapter (the state of step 1 of every run), computes each objective's loss from one shared
forward pass, and its LoRA gradient. Per objective it prints:

- ``kept``: share of supervised tokens left in the loss;
- ``signal``: the objective's share of SFT's gradient "mass", sum of w * keep * factor * (1 - p)
  over supervised tokens divided by sum of (1 - p); (1 - p) is the norm scale of a token's
  cross-entropy gradient with respect to its logit, so tokens at p ~ 1 contribute almost nothing;
- ``cosine``: cosine similarity of the objective's LoRA gradient with SFT's (1.0 = same direction);
- ``norm``: its gradient norm relative to SFT's.

Writes ``experiments/comparison/<size>/objective_signal.json``. Explains why objectives that
drop confident tokens barely change training (docs/results.md, "What the numbers say").
"""

from __future__ import annotations

import argparse
import io
import json
import random
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from run_comparison import DATA_DIR, EXPERIMENTS, METHODS, SIZES, Run, job_config, write_split  # noqa: E402

from cuset_core.models import load_tokenizer  # noqa: E402
from cuset_core.objectives import MethodConfig  # noqa: E402
from cuset_core.objectives.objective import ObjectiveBatch, compute_objective  # noqa: E402
from cuset_core.objectives.rules import token_factor  # noqa: E402
from cuset_core.objectives.state import ObjectiveState  # noqa: E402
from cuset_core.objectives.token_loss import per_token_loss, supervised_mask  # noqa: E402
from cuset_core.training.callbacks import ProgressWriter  # noqa: E402
from cuset_core.training.collator import CusetCollator, as_item  # noqa: E402
from cuset_core.training.config import TuneConfig, parse_config  # noqa: E402
from cuset_core.training.run import load_examples, prepare_model  # noqa: E402


def signal_config(size_name: str, seed: int) -> TuneConfig:
    """The comparison's ``sft`` job of this size, with LoRA dropout off (deterministic gradients)
    and no gradient checkpointing (one forward pass serves every objective's backward)."""
    data = job_config(SIZES[size_name], Run("sft", seed), "smollm2-135m")
    if data["lora"] is not None:
        data["lora"] = {**data["lora"], "dropout": 0.0}
    data["hyperparameters"]["gradient_checkpointing"] = False
    return parse_config({**data, "train_file": DATA_DIR / "train.jsonl", "output_dir": ROOT / "runs" / "signal"})


def batches(config: TuneConfig, count: int, tokenizer) -> list[dict]:
    """``count`` micro-batches of the job's batch size, examples in a seeded order."""
    quiet = ProgressWriter(None, stream=io.StringIO())
    examples = load_examples(config.train_file, config, tokenizer, quiet, "train_file")
    random.Random(config.seed).shuffle(examples)
    size = config.hyperparameters.batch_size
    collate = CusetCollator(pad_token_id=tokenizer.pad_token_id)
    items = [as_item(example) for example in examples[: count * size]]
    return [collate(items[i : i + size]) for i in range(0, len(items), size)]


def signal_share(config: MethodConfig, out, p: torch.Tensor, supervised: torch.Tensor) -> float:
    """sum of w * keep * factor * (1 - p) over sum of (1 - p): the objective's share of SFT's
    per-token gradient scale (the factor is p for dft, (1 - p)^gamma for focal, else 1)."""
    factor = token_factor(config.type, p, config.focal_gamma)
    scale = (1 - p) * supervised
    kept = out.sample_weights[:, None] * out.keep * scale * (1.0 if factor is None else factor)
    return float(kept.sum() / scale.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=["small"])
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--knobs", type=json.loads, default={}, help="extra knobs for the CuSeT-family objectives")
    parser.add_argument(
        "--methods",
        nargs="+",
        default=list(METHODS),
        choices=[*METHODS, "cuset_v1"],
        help="objectives to compare (sft is always included: it is the reference)",
    )
    args = parser.parse_args()
    if not (DATA_DIR / "train.jsonl").is_file():
        write_split()  # deterministic: rebuilds the committed split's JSONL files
    torch.manual_seed(args.seed)
    config = signal_config(args.size, args.seed)
    tokenizer = load_tokenizer(config.model)
    model = prepare_model(config)
    params = [p for p in model.parameters() if p.requires_grad]
    methods = ["sft", *(m for m in args.methods if m != "sft")]
    configs = {m: MethodConfig(type=m, **(args.knobs if m.startswith("cuset") else {})) for m in methods}
    rows: dict[str, list[dict]] = {m: [] for m in methods}
    # One objective state per method, the batches as consecutive steps (the EMAs of v2 move).
    states = {m: ObjectiveState.for_method(c.tau_lo_decay, c.normaliser_decay) for m, c in configs.items()}
    for index, batch in enumerate(batches(config, args.batches, tokenizer)):
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
        token_loss = per_token_loss(model(**inputs).logits, batch["labels"])
        supervised = supervised_mask(batch["labels"])
        p = torch.exp(-token_loss.detach())
        grads = {}
        for method, config in configs.items():
            out = compute_objective(
                config,
                ObjectiveBatch(
                    token_loss=token_loss,
                    supervised=supervised,
                    sensitive=batch["sensitive"],
                    region_ids=batch["region_ids"],
                    num_items_in_batch=None,
                    step=index,
                ),
                state=states[method],
            )
            grads[method] = torch.cat(
                [g.reshape(-1).double() for g in torch.autograd.grad(out.loss, params, retain_graph=True)]
            )
            rows[method].append(
                {
                    "kept": float(out.keep.sum() / supervised.sum()),
                    "dropped_grad_share": out.metrics.get("dropped_grad_share", 0.0),
                    "signal": signal_share(config, out, p, supervised),
                    "weight_max": float(out.sample_weights.max()),
                }
            )
        for method, grad in grads.items():
            rows[method][-1]["cosine"] = float(torch.nn.functional.cosine_similarity(grad, grads["sft"], dim=0))
            rows[method][-1]["norm"] = float(grad.norm() / grads["sft"].norm())
        print(
            f"batch {index + 1}/{args.batches}: "
            + ", ".join(f"{m} cos {rows[m][-1]['cosine']:.3f}" for m in methods if m != "sft"),
            flush=True,
        )
    summary = {m: {key: round(statistics.fmean(r[key] for r in rs), 4) for key in rs[0]} for m, rs in rows.items()}
    result = {"size": args.size, "batches": args.batches, "seed": args.seed, "knobs": args.knobs, "methods": summary}
    suffix = "" if not args.knobs else "_" + "_".join(f"{k}{v}" for k, v in sorted(args.knobs.items()))
    out_path = EXPERIMENTS / args.size / f"objective_signal{suffix}.json"
    out_path.write_text(json.dumps(result, indent=1) + "\n")
    print("| objective | kept | dropped grad share | signal | cosine with sft | norm / sft | max weight |")
    print("|---|---|---|---|---|---|---|")
    for method, s in summary.items():
        print(
            f"| {method} | {s['kept']:.3f} | {s['dropped_grad_share']:.3f} | {s['signal']:.3f} | {s['cosine']:.4f} | "
            f"{s['norm']:.3f} | "
            f"{s['weight_max']:.3f} |"
        )
    print(f"wrote {out_path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
