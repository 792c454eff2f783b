"""Train one variant for one seed with the ordinary engine; select on validation only."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from labs.conditional_reverse import metrics
from labs.conditional_reverse.model import build_model
from labs.conditional_reverse.task import Profile, Split
from riftco.cajal.programmed import TimeRangeLoss
from riftco.optim import Adam, ConstantSchedule
from riftco.train import ExampleSampler, Trainer


def train_variant(
    variant: str,
    profile: Profile,
    seed: int,
    splits: dict[str, Split],
    *,
    keep_points: bool = False,
    log: Any = None,
) -> dict[str, Any]:
    """Train, keep the state with the best validation token accuracy (evaluated every
    ``eval_every`` steps and at the end), then measure the test split once."""
    started = time.perf_counter()
    length = profile.length
    model = build_model(variant, profile, seed)
    train = splits["train"]
    source = ExampleSampler(
        list(train.rows), context=2 * length, batch_size=profile.batch_size, seed=seed
    )
    optimizer = Adam(model.parameters(), lr=profile.lr, max_grad_norm=profile.max_grad_norm)
    total = profile.total_steps()
    trainer = Trainer(
        model,
        optimizer,
        ConstantSchedule(profile.lr),
        source,
        stage="pretraining",
        total_steps=total,
        loss_function=TimeRangeLoss(length, 2 * length),
    )
    best, best_step, best_state = -1.0, 0, None
    history = []
    while trainer.step < total:
        trainer.run(until=min(total, trainer.step + profile.eval_every))
        predictions, _ = metrics.run_split(model, splits["validation"], length)
        score = metrics.accuracy(predictions, splits["validation"], length)["all_token"]
        history.append({"step": trainer.step, "validation_token": score})
        if score > best:
            best, best_step = score, trainer.step
            best_state = {k: np.array(v.numpy(), copy=True) for k, v in model.state_dict().items()}
        if log:
            log(
                f"  {variant} seed {seed} step {trainer.step}/{total}: validation token {score:.4f}"
            )
    train_seconds = time.perf_counter() - started
    model.load_state_dict(best_state)
    evaluated = time.perf_counter()
    test = splits["test"]
    predictions, _ = metrics.run_split(model, test, length)
    result = {
        "variant": variant,
        "seed": seed,
        "selected_step": best_step,
        "selected_validation_token": best,
        "validation_history": history,
        "train_losses": [round(m.loss, 5) for m in trainer.history if m.phase == "train"],
        "test": metrics.accuracy(predictions, test, length),
        "ablations": metrics.ablations(model, test, length, predictions, seed),
        "steering": metrics.steering(model, test, profile, splits["probe"]),
        "pca": metrics.pca_of_probe(model, splits["probe"], length, keep_points),
        "parameters": model.num_parameters(trainable_only=True),
        "timings": {
            "train_seconds": train_seconds,
            "evaluation_seconds": time.perf_counter() - evaluated,
            "steps": total,
        },
    }
    return result
