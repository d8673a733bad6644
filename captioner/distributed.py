"""Several processes of one launch (``accelerate launch``, ``torchrun``, or one command per machine with
RANK / WORLD_SIZE / MASTER_ADDR set): what they must agree on, and how they fail.

- ``agree``: every process sends what it resolved from its own arguments and files (encoder, dataset, run
  config); when they differ, every process raises the same one-line CaptionerError naming the field and
  the two values, before any work is done.
- ``collective``: a collective (barrier, all-reduce) whose peer died raises a one-line CaptionerError
  instead of a gloo / NCCL traceback; the launcher's SIGTERM to the survivors does the same.
- ``gather_rows`` / ``all_reduce_sum`` / ``sync_batchnorm``: differentiable collectives that let N
  processes holding 1/N of a batch compute the loss and gradients of the whole batch (regularisers and
  BatchNorm statistics over the global batch), on CPU (gloo) as on GPUs (NCCL).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys

from captioner.errors import CaptionerError

RERUN = "rerun the same command to resume from the work already saved"


def world_size() -> int:
    """Processes in this launch (1 when not launched as several). A process group exists only where
    ``torch.distributed`` was imported, so this imports no torch (~2 s) in a single CLI call."""
    import sys

    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def process_state(cpu: bool | None = None):
    """accelerate's PartialState for this launch (joins its process group: gloo on CPU, NCCL on GPUs).

    ``cpu``: None picks CPU where no GPU is visible. accelerate counts the processes of a CPU-only launch
    only when told it runs on CPU; otherwise each process would believe it is alone."""
    from accelerate import PartialState

    if cpu is None:
        import torch

        cpu = not torch.cuda.is_available()
    return PartialState(cpu=cpu)


def is_lost_peer(e: BaseException) -> bool:
    """Whether ``e`` is a collective failing because another process is gone or unreachable."""
    import torch.distributed as dist

    if isinstance(e, getattr(dist, "DistError", ())):
        return True
    msg = str(e)
    return isinstance(e, RuntimeError) and any(s in msg for s in (
        "Connection closed by peer", "Connection reset by peer", "Broken pipe", "gloo", "Gloo", "NCCL",
        "Timed out", "timed out", "closed connection"))


@contextlib.contextmanager
def collective(where: str):
    """Turn a collective failure inside the block (a peer died, the network went) into one line."""
    try:
        yield
    except CaptionerError:
        raise
    except (RuntimeError, OSError) as e:
        if world_size() <= 1 or not is_lost_peer(e):
            raise
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise CaptionerError(
            f"process {rank()} of {world_size()}: lost contact with another process of this launch during "
            f"{where} ({first}); that process died or was stopped (its own message says why); {RERUN}"
        ) from None


def _on_sigterm(signum, frame):  # pragma: no cover - exercised in subprocesses
    raise CaptionerError(f"process {rank()} of {world_size()}: stopped by the launcher (signal {signum}) because "
                         f"another process of this launch failed or the run was cancelled; {RERUN}")


def install_stop_handler() -> None:
    """Under a launcher, SIGTERM (sent to the survivors when one process fails) ends this process with one
    line instead of a traceback. Only from the main thread, only when several processes run."""
    import signal
    import threading

    if world_size() > 1 and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)


def exit_launched(code: int) -> None:
    """In a process of a launch whose process group is up, end now with ``code`` (streams flushed) without
    running the interpreter's teardown: when the other processes have already gone, destroying the process
    group can abort this one (SIGABRT, exit -6, seen when every process stopped on the same error) instead
    of ending with the one-line message it already printed. Returns in a single process."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or world_size() <= 1 or not (dist.is_available() and dist.is_initialized()):
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _digest(fields: dict) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


def agree(what: str, fields: dict, hint: str = "give every process the same arguments and the same files") -> None:
    """Check that every process resolved the same ``fields`` (small JSON-able values); otherwise raise, on
    every process, the same CaptionerError naming the first field that differs and the values of the
    lowest two ranks that disagree. A no-op in a single process."""
    if world_size() <= 1:
        return
    import torch.distributed as dist

    if not dist.is_initialized():
        process_state()
    install_stop_handler()
    fields = _flat(fields)
    mine = (_digest(fields), fields)
    allf: list = [None] * dist.get_world_size()
    with collective(f"the agreement check on {what}"):
        dist.all_gather_object(allf, mine)
    if len({d for d, _ in allf}) == 1:
        return
    ref = allf[0][1]
    for r, (d, other) in enumerate(allf):
        if d == allf[0][0]:
            continue
        keys = sorted(set(ref) | set(other), key=str)
        diff = [k for k in keys if _digest({"v": ref.get(k)}) != _digest({"v": other.get(k)})]
        k = diff[0] if diff else "?"
        raise CaptionerError(
            f"the {len(allf)} processes of this launch disagree on {what}: {k} is {_short(ref.get(k))} on "
            f"process 0 but {_short(other.get(k))} on process {r}"
            + (f" (and {len(diff) - 1} more field(s))" if len(diff) > 1 else "") + f"; {hint}")


def _flat(d: dict, prefix: str = "") -> dict:
    """Nested dicts as dotted keys, so that a difference names the innermost field (``objective.reg``)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _short(v, n: int = 80) -> str:
    s = repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."


# ------------------------------------------------------------------------- differentiable collectives
def _autograd_ops():
    import torch
    import torch.distributed as dist

    class AllReduceSum(torch.autograd.Function):
        """y = sum over processes of x, on every process. The gradient of x is the sum over processes of
        the gradient of y (every process's loss depends on every x)."""

        @staticmethod
        def forward(ctx, x):
            y = x.detach().clone().contiguous()
            dist.all_reduce(y)
            return y

        @staticmethod
        def backward(ctx, g):
            g = g.detach().clone().contiguous()
            dist.all_reduce(g)
            return g

    class GatherRows(torch.autograd.Function):
        """Concatenate every process's rows in rank order (same row count everywhere); the gradient of
        this process's rows is the sum over processes of the gradient of those rows."""

        @staticmethod
        def forward(ctx, x):
            x = x.detach().contiguous()
            parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
            dist.all_gather(parts, x)
            ctx.rows, ctx.rank = x.shape[0], dist.get_rank()
            return torch.cat(parts)

        @staticmethod
        def backward(ctx, g):
            g = g.detach().clone().contiguous()
            dist.all_reduce(g)
            return g[ctx.rank * ctx.rows:(ctx.rank + 1) * ctx.rows]

    return AllReduceSum, GatherRows


_OPS = None


def _ops():
    global _OPS
    if _OPS is None:
        _OPS = _autograd_ops()
    return _OPS


def _active() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def gather_rows(z):
    """(B_local, D) -> ((B_local * world, D) rows of all processes in rank order, first row index of this
    process's own rows). Unchanged (and offset 0) in a single process.

    A loss that every process computes on the gathered rows, averaged over processes the way
    DistributedDataParallel averages gradients, has exactly the gradient of the one-process loss."""
    if not _active():
        return z, 0
    import torch.distributed as dist

    return _ops()[1].apply(z), dist.get_rank() * z.shape[0]


def all_reduce_sum(x):
    """Differentiable sum over processes (``x`` itself in a single process)."""
    return _ops()[0].apply(x) if _active() else x


_BN = None


def _bn_class():
    """A BatchNorm whose training statistics are those of the global batch (built once, torch imported late)."""
    global _BN
    if _BN is not None:
        return _BN
    import torch

    class GlobalBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
        def _check_input_dim(self, x):  # the replaced class checked it already
            pass

        def forward(self, x):
            if not (self.training and _active()):
                return super().forward(x)
            dims = [0] + list(range(2, x.dim()))
            shape = [1, -1] + [1] * (x.dim() - 2)
            xf = x.float()
            stats = all_reduce_sum(torch.cat([xf.sum(dims), xf.new_tensor([float(x.numel() // x.shape[1])])]))
            n = stats[-1]
            mean = stats[:-1] / n
            var = all_reduce_sum((xf - mean.view(shape)).pow(2).sum(dims)) / n
            with torch.no_grad():
                if self.track_running_stats:
                    self.num_batches_tracked.add_(1)
                    m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                    unbiased = var.detach() * n / max(float(n) - 1, 1.0)
                    self.running_mean.mul_(1 - m).add_(mean.detach(), alpha=m)
                    self.running_var.mul_(1 - m).add_(unbiased, alpha=m)
            y = (xf - mean.view(shape)) / torch.sqrt(var.view(shape) + self.eps)
            if self.affine:
                y = y * self.weight.view(shape) + self.bias.view(shape)
            return y.to(x.dtype)

    _BN = GlobalBatchNorm
    return _BN


def sync_batchnorm(model):
    """Make every BatchNorm of ``model`` normalise with the statistics of the global batch (sums all-reduced
    over processes), so that N processes compute what one does. Works on CPU (gloo), unlike
    torch.nn.SyncBatchNorm; parameter and buffer names are unchanged (checkpoints load either way), and
    in eval mode or a single process it is the plain BatchNorm."""
    import torch

    cls = _bn_class()
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and not isinstance(m, torch.nn.SyncBatchNorm):
            m.__class__ = cls
    return model
