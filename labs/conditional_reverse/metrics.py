"""Teacher-forced metrics, the exact oracle, controls, batch-roll ablations, steering and
PCA of probe captures."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import riftco.tensor as rt
from labs.conditional_reverse.programs import conditional_reverse
from labs.conditional_reverse.task import Profile, Split, control_predictions
from riftco.autograd import no_grad
from riftco.cajal.analysis import PCA, paired_ablation, representation_matrix
from riftco.cajal.lowering import lower
from riftco.cajal.programmed import ProgrammedDecoder, RollBranch, Steer

EVAL_BATCH = 500
PLOT_POINTS = 1000


def run_split(
    model: ProgrammedDecoder,
    split: Split,
    length: int,
    *,
    interventions: Sequence = (),
    capture: Sequence[str] = (),
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Teacher-forced predictions ``[N, L]`` of the target symbols, and the captures
    (batch-roll interventions act within each evaluation batch)."""
    predictions, traces = [], {name: [] for name in capture}
    with no_grad():
        for start in range(0, len(split), EVAL_BATCH):
            ids = split.inputs[start : start + EVAL_BATCH]
            out = model.run(ids, capture=capture, interventions=interventions)
            logits = out.logits.numpy()[:, length : 2 * length]
            predictions.append(logits.argmax(axis=-1))
            for name in capture:
                traces[name].append(out.traces[name])
    return np.concatenate(predictions), {k: np.concatenate(v) for k, v in traces.items()}


def token_accuracy_per_example(predictions: np.ndarray, split: Split, length: int) -> np.ndarray:
    return (predictions == split.rows[:, length + 1 :]).mean(axis=1)


def accuracy(predictions: np.ndarray, split: Split, length: int) -> dict[str, float]:
    """Token and exact-sequence accuracy, overall and per branch (trigger or not)."""
    correct = predictions == split.rows[:, length + 1 :]
    result = {}
    for name, mask in (
        ("all", np.ones(len(split), dtype=bool)),
        ("trigger", split.triggered),
        ("no_trigger", ~split.triggered),
    ):
        part = correct[mask]
        result[f"{name}_token"] = float(part.mean()) if part.size else None
        result[f"{name}_exact"] = float(part.all(axis=1).mean()) if part.size else None
    return result


def controls(split: Split, length: int) -> dict[str, dict[str, float]]:
    return {
        kind: accuracy(control_predictions(split, kind), split, length)
        for kind in ("copy", "reverse")
    }


def oracle(profile: Profile, split: Split) -> dict[str, float]:
    """The exact F program on exact encodings of each source and its condition."""
    length, symbols = profile.length, profile.symbols
    module = lower(conditional_reverse(length, symbols))
    x = np.eye(symbols, dtype=np.float32)[split.sources].reshape(len(split), -1)
    c = np.eye(2, dtype=np.float32)[split.triggered.astype(np.int64)]
    with no_grad():
        out = module(rt.from_numpy(x), rt.from_numpy(c)).numpy()
    predictions = out.reshape(len(split), length, symbols).argmax(axis=-1)
    return accuracy(predictions, split, length)


def ablations(
    model: ProgrammedDecoder, split: Split, length: int, baseline: np.ndarray, seed: int
) -> dict[str, dict]:
    """Batch-roll each branch: accuracy, and the paired effect on per-example token
    accuracy (bootstrap 95% interval)."""
    base = token_accuracy_per_example(baseline, split, length)
    results = {}
    for branch in model.branch_names():
        predictions, _ = run_split(model, split, length, interventions=[RollBranch(branch)])
        stats = paired_ablation(
            base, token_accuracy_per_example(predictions, split, length), seed=seed
        )
        results[branch] = {"accuracy": accuracy(predictions, split, length), **stats.to_dict()}
    return results


def steering(
    model: ProgrammedDecoder,
    split: Split,
    profile: Profile,
    probe: Split,
    scales: Sequence[float] = (0.5, 1, 2, 4),
) -> dict[str, dict[str, float]]:
    """Privileged-basis steering of the program's logical vectors, calibrated on the
    probe split (never on the split measured).

    ``condition`` (F and T): the program reads its condition coordinate by coordinate
    (copy weighted by ``c_0``, reversal by ``c_1``), so each coordinate is a privileged
    direction, though training fixes its sign and scale. Each basis vector ``e_k`` is
    added with ``scale * (mean over trigger probes - mean over no-trigger probes)`` of
    ``c_k``; reported: the rate at which a no-trigger example's predicted target becomes
    the reversal (``exact``) and the fraction of its tokens that do (``token``).

    ``output``: adding ``scale * m * e_k`` (``m`` the probe mean of the slot's largest
    coordinate) to the program output's first slot at the last letter ``k``; reported:
    the rate at which the first prediction becomes that letter (over examples whose first
    target is another letter). ``x_alignment``: the fraction of source positions whose
    learned letter code has its largest (or smallest) coordinate at the letter's own
    index. The program only permutes slots, so nothing ties the letter code to its basis.
    """
    length, symbols = profile.length, profile.symbols
    branch = model.program_branch
    if branch is None:
        return {}
    sites = ["program.output", "program.input.x"] + (
        ["program.input.c"] if "c" in branch.names else []
    )
    _, calibration = run_split(model, probe, length, capture=sites)
    output_unit = float(calibration["program.output"][:, :symbols].max(axis=1).mean())
    codes = calibration["program.input.x"].reshape(len(probe), length, symbols)
    result: dict[str, dict[str, float]] = {
        "x_alignment": {
            "argmax": float((codes.argmax(axis=-1) == probe.sources).mean()),
            "argmin": float((codes.argmin(axis=-1) == probe.sources).mean()),
        },
        "output": {},
    }
    letter = symbols - 1
    others = split.rows[:, length + 1] != letter
    for scale in scales:
        steer = [Steer("program.output", letter, float(scale) * output_unit)]
        predictions, _ = run_split(model, split, length, interventions=steer)
        result["output"][str(scale)] = float((predictions[others, 0] == letter).mean())
    if "program.input.c" in calibration:
        c = calibration["program.input.c"]
        step = c[probe.triggered].mean(axis=0) - c[~probe.triggered].mean(axis=0)
        plain = ~split.triggered
        reversed_targets = split.sources[:, ::-1]
        result["condition_exact"], result["condition_token"] = {}, {}
        for scale in scales:
            flip = [Steer("program.input.c", k, float(scale * step[k])) for k in range(2)]
            predictions, _ = run_split(model, split, length, interventions=flip)
            hits = predictions == reversed_targets
            result["condition_exact"][str(scale)] = float(hits.all(axis=1)[plain].mean())
            result["condition_token"][str(scale)] = float(hits[plain].mean())
        result["condition_step"] = {"c0": float(step[0]), "c1": float(step[1])}
    result["output_unit"] = {"m": output_unit}
    return result


def pca_of_probe(
    model: ProgrammedDecoder, probe: Split, length: int, keep_points: bool
) -> dict[str, dict]:
    """PCA (2 components) of probe-split captures: the final hidden state at the
    separator (where the first target symbol is predicted), and the program's
    condition input where there is one. ``separation``: the distance between the trigger
    and no-trigger means along PC1 over the pooled standard deviation."""
    sites = ["final"] + (
        ["program.input.c"] if model.program_branch and "c" in model.program_branch.names else []
    )
    _, traces = run_split(model, probe, length, capture=sites)
    result = {}
    for site in sites:
        matrix = representation_matrix(traces, site, positions=length if site == "final" else None)
        pca = PCA.fit(matrix, components=2)
        coordinates = pca.transform(matrix)
        first = coordinates[:, 0]
        a, b = first[probe.triggered], first[~probe.triggered]
        pooled = np.sqrt((a.var() + b.var()) / 2) or 1.0
        entry = {
            "explained_variance_ratio": [float(v) for v in pca.explained_variance_ratio],
            "separation": float(abs(a.mean() - b.mean()) / pooled),
        }
        if keep_points:  # the first PLOT_POINTS probe examples, for the scatter plot
            entry["points"] = np.round(coordinates[:PLOT_POINTS], 3).tolist()
            entry["triggered"] = probe.triggered[:PLOT_POINTS].astype(int).tolist()
        result[site] = entry
    return result
