"""``python -m eval align``: the matchers' benchmarks (``bench``, ``bench --real``) and the pair-free
diagnosis' validation (``diagnose-validate``, ``cka-table``); the product's ``captioner align`` fits, scores
and diagnoses."""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import click

from alignment.pairfree import MATCHERS
from captioner.errors import CaptionerError


@contextmanager
def _user_errors():
    """alignment/'s own errors as one-line captioner errors (as ``captioner align`` shows them)."""
    from alignment.errors import AlignmentError

    try:
        yield
    except AlignmentError as e:
        raise CaptionerError(str(e)) from None


@click.group()
def cli():
    """Benchmark the pair-free matchers and validate the pair-free diagnosis."""


@cli.command("bench")
@click.option("--n", "ns", type=int, multiple=True, default=(1000, 5000), show_default=True,
              help="Problem sizes (repeatable).")
@click.option("--dim", type=int, default=384, show_default=True)
@click.option("--gw/--no-gw", default=True, show_default=True, help="Also run POT's entropic GW (slow).")
@click.option("--gw-max-n", type=int, default=5000, show_default=True, help="Skip GW above this N.")
@click.option("--procrustes", "proc", default="50000x768", show_default=True,
              help="NxD for the Procrustes-vs-scipy timing, or 'none'.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--noise", "noises", type=float, multiple=True, default=(0.05,), show_default=True,
              help="Noise as a multiple of rms(X) (repeatable).")
@click.option("--overlap", "overlaps", type=float, multiple=True, default=(1.0,), show_default=True,
              help="Fraction of Y's rows that are copies of X rows; the others are new points (repeatable).")
@click.option("--baseline", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Another alignment/pairfree.py (e.g. main's) timed on the same problems.")
@click.option("--baseline-max-n", type=int, default=50_000, show_default=True,
              help="Skip the baseline above this N (main's matcher is quadratic).")
@click.option("--real", "real", default=None,
              type=click.Choice(["quick", "cupl", "scale", "text", "image", "cross", "synthetic", "all"]),
              help="The real-data benchmark instead (eval.matcher_real): quick = CuPL MiniLM-L6 -> L3 and the "
                   "Rosetta-style synthetic problems; cupl (every text pair on CuPL); scale (L6 -> L3, disjoint halves of "
                   "--real-n rows); text / image / cross / synthetic; all.")
@click.option("--real-n", type=int, default=3000, show_default=True, help="--real: rows a side.")
@click.option("--matchers", default="ours,rosetta,multistart,auto", show_default=True,
              help="--real: the matchers to run, comma-separated.")
@click.option("--out", type=click.Path(), default=None, help="Also write the JSON here.")
@click.option("--json", "as_json", is_flag=True)
def bench_cmd(ns, dim, gw, gw_max_n, proc, seed, noises, overlaps, baseline, baseline_max_n, real, real_n, matchers,
              out, as_json):
    """Synthetic benchmark: our pair-free matcher vs POT's entropic GW (time, peak memory, exact-match
    accuracy) on rotated, noisy, shuffled power-law clouds, and Procrustes vs scipy on paired rows. Sizes
    above 60,000 are synthesised in blocks (e.g. --n 50000 --n 100000 --n 300000 --n 1000000, which also
    prints the per-point cost ratio against N log N)."""
    if real:
        from eval import matcher_real

        ms = [m.strip() for m in matchers.split(",") if m.strip()]
        bad = [m for m in ms if m not in MATCHERS]
        if bad:
            raise CaptionerError(f"unknown matcher {bad[0]!r}; known: {', '.join(MATCHERS)}")
        with _user_errors():
            if out:
                Path(out).parent.mkdir(parents=True, exist_ok=True)
            res = matcher_real.run(real, real_n, methods=ms, seed=seed, progress=not as_json, out=out)
        click.echo(json.dumps(res, indent=2) if as_json else matcher_real.table(res))
        return
    from eval.matcher_bench import run, table

    try:
        pr = None if proc == "none" else tuple(int(v) for v in proc.lower().split("x"))
        if pr is not None and len(pr) != 2:
            raise ValueError
    except ValueError:
        raise CaptionerError(f"--procrustes must look like 50000x768 or 'none', not {proc!r}") from None
    with _user_errors():
        bad = [v for v in overlaps if not 0 < v <= 1] + [v for v in noises if v < 0]
        if bad:
            raise CaptionerError(f"--overlap must be in (0, 1] and --noise >= 0, not {bad[0]}")
        res = run(ns, dim, pr, gw=gw, gw_max_n=gw_max_n, seed=seed, progress=not as_json, noises=noises,
                  overlaps=overlaps, baseline=baseline, baseline_max_n=baseline_max_n)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(res, indent=2) + "\n")
    click.echo(json.dumps(res, indent=2) if as_json else table(res))


@cli.command("diagnose-validate")
@click.option("--real/--no-real", default=True, show_default=True, help="Include the Tux Paint encoder pairs.")
@click.option("--n", type=int, default=1000, show_default=True, help="Rows of the synthetic cases.")
@click.option("--world", type=click.Choice(["quick", "lab", "gpu"]), default=None,
              help="Also the JEPA world's cases, seeds 0-2 of this preset (needs `captioner world train`).")
@click.option("--heldout", type=int, default=0, show_default=True,
              help="Also the CuPL text cases (MiniLM-L6 / L3 / MPNet, same and disjoint) with N sentences a side, "
                   "scored by FOSCTTM on held-out pairs (0: not run).")
@click.option("--out", type=click.Path(), default=None, help="Also write the JSON here (rewritten as cases finish).")
@click.option("--json", "as_json", is_flag=True)
def validate_cmd(real, n, world, heldout, out, as_json):
    """The diagnosis' verdict against the measured outcome on cases with a known answer (a table)."""
    from eval.pairfree_diagnose import run, table

    res = run(n=n, real=real, world=world, heldout=heldout, out=out, progress=not as_json)
    if out:
        from pathlib import Path

        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(res, indent=2, default=float) + "\n")
    click.echo(json.dumps(res, default=float) if as_json else table(res))


@cli.command("cka-table")
@click.option("--split", default="train", show_default=True, help="Tux Paint split of the paired probe set.")
@click.option("--image-encoder", "images", multiple=True, help="Repeatable (default: every offline image encoder).")
@click.option("--text-encoder", "texts", multiple=True, help="Repeatable (default: every offline text encoder).")
@click.option("--n-perm", type=int, default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def cka_table_cmd(split, images, texts, n_perm, as_json):
    """CKA, unbiased CKA and mutual k-NN (with permutation-null z) of every encoder pair on Tux Paint pairs."""
    from eval.pairfree_diagnose import cka_table, cka_table_text

    res = cka_table(split, list(images) or None, list(texts) or None, n_perm=n_perm)
    click.echo(json.dumps(res, default=float) if as_json else cka_table_text(res))


@cli.command("libraries")
@click.option("--quick", is_flag=True, help="Smaller sizes (seconds).")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the JSON here.")
def libraries_cmd(quick, out):
    """The field's libraries (faiss, POT, scipy) against the matchers' own kernels: JSON, then a table."""
    from eval.library_bench import run, table

    res = run(quick, out)
    click.echo(json.dumps(res))
    click.echo(table(res))
