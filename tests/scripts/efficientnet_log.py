"""Writes EfficientNet-B4 MLPerf logs in exactly the harness's format, for the ruleset tests.

The event sequence, call-site metadata and JSON layout are those of a log run_benchmark wrote
for ResNet-50 (harness/run_loop.cpp: cache_clear, init_start, submission header, seed, the
hyperparameters with train/eval_samples, ipu_* keys, weights_initialization per tensor,
init_stop, run_start, blocks of epochs ending at the evaluation epochs, eval_start/stop,
eval_accuracy, ipu_weights_crc32, run_stop with metadata status); EfficientNet's keys and values
in place of ResNet's.
"""

import json

T0 = 1796619493017

CLOSED_HPARAMS = {
    # Graphcore's G1 POD16 batch (3 x 64 x 4), the reference rule k = 0.016 per 256 images.
    "global_batch_size": 768,
    "gradient_accumulation_steps": 64,
    "benchmark_scale": "full",  # before the keys it decides, as the harness logs it
    "opt_name": "rmsprop",
    "opt_base_learning_rate": 0.016 * 768 / 256,
    "opt_learning_rate_warmup_epochs": 5,
    "opt_rmsprop_decay": 0.9,
    "opt_rmsprop_momentum": 0.9,
    "opt_rmsprop_epsilon": 0.001,
    "opt_learning_rate_decay_factor": 0.97,
    "opt_learning_rate_decay_epochs": 2.4,
    "label_smoothing": 0.1,
    "opt_weight_decay": 1e-05,
    "opt_weight_decay_skip_norm": True,
    "model_eval_ema_factor": 0.9999,
    "dropout_rate": 0.4,
    "stochastic_depth_rate": 0.2,
    "model_variant": "b4",
    "norm_type": "batch_norm",
    "model_bn_span": 3,
    "model_bn_momentum": 0.9,
    "model_classifier_init_fan_out": 1000,
}

# The closed mini recipe (efficientnet_b4.json "mini"): POD1's Fashion-MNIST run.
CLOSED_MINI_HPARAMS = dict(CLOSED_HPARAMS, **{
    "global_batch_size": 16,
    "gradient_accumulation_steps": 1,
    "benchmark_scale": "mini",
    "opt_base_learning_rate": 0.001,
    "opt_learning_rate_warmup_epochs": 1,
    "label_smoothing": 0.0,
    "model_eval_ema_factor": 0.0,
    "dropout_rate": 0.0,
    "stochastic_depth_rate": 0.0,
    "model_bn_span": 16,
    "model_bn_momentum": 0.5,
})

# Graphcore's G16 configuration (EFFICIENTNET_FACTS.md 4.1): micro-batch 5, accumulation 40,
# 4 replicas, group norm, RMSProp decay scaled with the batch (1 - 2^-14 x 800).
OPEN_G16_HPARAMS = dict(CLOSED_HPARAMS, **{
    "global_batch_size": 800,
    "gradient_accumulation_steps": 40,
    "opt_base_learning_rate": 800 * 2 ** -14,
    "opt_rmsprop_decay": 1 - 800 * 2 ** -14,
    "model_variant": "g16",
    "norm_type": "group_norm",
})
del OPEN_G16_HPARAMS["model_bn_span"]


def _line(time_ms, event_type, key, value, lineno, **extra):
    metadata = {"file": "harness/run_loop.cpp", "lineno": lineno}
    metadata.update(extra)
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": time_ms, "event_type": event_type,
                                     "key": key, "value": value, "metadata": metadata})


def make_log(hparams, tensor_names, division="closed", accuracies=None, eval_offset=0,
             status=None, drop_keys=(), benchmark="efficientnet_b4", target=0.82):
    """The lines of one run. accuracies: {epoch: top-1}, evaluated in that order; status:
    run_stop's status (default success if the last accuracy reaches `target`, else aborted)."""
    if accuracies is None:
        first = 4 - eval_offset
        epochs = list(range(first, first + 4 * 9, 4))
        accuracies = {e: round(0.30 + 0.5205 * i / (len(epochs) - 1), 4)
                      for i, e in enumerate(epochs)}
    if status is None:
        status = "success" if list(accuracies.values())[-1] >= target else "aborted"
    t = T0
    out = []

    def point(key, value, lineno, **extra):
        if key not in drop_keys:
            out.append(_line(t, "POINT_IN_TIME", key, value, lineno, **extra))

    def interval(kind, key, lineno, **extra):
        if key not in drop_keys:
            out.append(_line(t, kind, key, None, lineno, **extra))

    point("cache_clear", True, 301)
    interval("INTERVAL_START", "init_start", 302)
    for key, value in [("submission_benchmark", benchmark), ("submission_division", division),
                       ("submission_org", "ipu_mlperf"), ("submission_status", "research"),
                       ("submission_platform", "ipu-pod16-emulated")]:
        point(key, value, 303)
    point("seed", 1, 304)
    for key, value in hparams.items():
        point(key, value, 315)
    point("train_samples", 1281167, 315)
    point("eval_samples", 50000, 315)
    point("ipu_precision", "16.32,loss=static:128,sr=off", 319)
    point("ipu_loss_scaling", "static:128", 320)
    for name in tensor_names:
        t += 1
        point("weights_initialization", None, 334, tensor=name)
    t += 5 * 60 * 1000
    interval("INTERVAL_END", "init_stop", 86)
    interval("INTERVAL_START", "run_start", 90)
    previous = 0
    for epoch, accuracy in accuracies.items():
        t += 700
        interval("INTERVAL_START", "block_start", 97, first_epoch_num=previous + 1,
                 epoch_count=epoch - previous)
        for e in range(previous + 1, epoch + 1):
            interval("INTERVAL_START", "epoch_start", 106, epoch_num=e)
            t += 170000
            interval("INTERVAL_END", "epoch_stop", 111, epoch_num=e)
        interval("INTERVAL_END", "block_stop", 102, first_epoch_num=previous + 1)
        interval("INTERVAL_START", "eval_start", 146, epoch_num=epoch)
        t += 4000
        interval("INTERVAL_END", "eval_stop", 150, epoch_num=epoch)
        point("eval_accuracy", accuracy, 456, epoch_num=epoch)
        point("ipu_weights_crc32", "a7d1a6a8", 469, epoch_num=epoch, train_steps=epoch * 1668)
        previous = epoch
    if status != "success":
        point("run_abort_reason", f"the target accuracy {target} was not reached in {previous} "
              "epoch(s)", 124)
    interval("INTERVAL_END", "run_stop", 125, epoch_num=previous, status=status)
    return out


def write_log(path, lines):
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path
