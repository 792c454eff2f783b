import io

from riftco.train.metrics import (
    MetricsLog,
    MovingAverage,
    ProgressBar,
    TrainingMetric,
    plot_loss_curve,
    read_metrics,
)


def metric(step, phase="train", loss=2.0):
    return TrainingMetric(
        "pretraining", phase, step, loss, 7.389, loss, 1.0, 1.0, 1e-3, 64 * step, 0.5 * step, 128.0
    )


def test_moving_average_is_bias_corrected_and_restorable():
    average = MovingAverage(0.9)
    assert average.value is None
    assert average.update(4.0) == 4.0
    average.update(2.0)
    copy = MovingAverage()
    copy.load_state_dict(average.state_dict())
    assert copy.update(3.0) == average.update(3.0)


def test_log_round_trip_and_resume_truncation(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    for step in range(1, 6):
        log(metric(step))
    log.close()
    assert [m.step for m in read_metrics(path)] == [1, 2, 3, 4, 5]
    log = MetricsLog(path, keep_through=3)
    log(metric(4, loss=1.5))
    log.close()
    found = read_metrics(path)
    assert [m.step for m in found] == [1, 2, 3, 4] and found[-1].loss == 1.5
    assert found[0] == metric(1) and found[0].without_timing().seconds == 0.0


def test_progress_bar_prints_loss_and_rate():
    out = io.StringIO()
    bar = ProgressBar(10, out, every=5)
    for step in range(1, 11):
        bar(metric(step))
    bar(metric(10, phase="validation", loss=1.25))
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    assert "10/10" in lines[2] and "loss 2.0000" in lines[2] and "128 tok/s" in lines[2]
    assert "validation at step 10: loss 1.2500" in lines[3]


def test_loss_curve_png(tmp_path):
    metrics = [metric(s) for s in range(1, 20)] + [metric(10, "validation", 2.5)]
    path = plot_loss_curve(metrics, tmp_path / "loss.png")
    if path is not None:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
