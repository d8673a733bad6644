"""The JEPAs' collapse-preventing regularisers and contrastive loss: SIGReg (Epps-Pulley test on random
slices), VICReg's variance/covariance terms, a covariance whitening term and InfoNCE. Plain torch."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


# ------------------------------------------------------------------------------------------ regularisers
def epps_pulley(x: torch.Tensor, knots: int = 17, tmax: float = 3.0) -> torch.Tensor:
    """Epps-Pulley statistic of each column of ``x`` against N(0, 1).

    .. math:: T = N \\int_{-t_{max}}^{t_{max}} |\\hat\\varphi_N(t) - e^{-t^2/2}|^2 \\, e^{-t^2/2} \\, dt

    with the empirical characteristic function :math:`\\hat\\varphi_N(t) = \\frac1N \\sum_j e^{i t x_j}`,
    integrated by the trapezoid rule on ``knots`` points of [0, tmax] and doubled (the integrand is even).
    Under H0 its expectation is :math:`\\int (1 - e^{-t^2}) e^{-t^2/2} dt \\approx 1.06`; it grows like N
    for a distribution that is not N(0, 1).

    Parameters
    ----------
    x : (N, M) tensor, M one-dimensional samples of size N.

    Returns
    -------
    (M,) tensor.
    """
    n = x.shape[0]
    t = torch.linspace(0.0, tmax, knots, device=x.device, dtype=torch.float32)  # (K,)
    w = torch.full((knots,), tmax / (knots - 1), device=x.device)
    w[0] = w[-1] = w[0] / 2
    w = 2 * w * torch.exp(-t ** 2 / 2)                                          # trapezoid x2 x window
    xt = x.float().unsqueeze(-1) * t                                            # (N, M, K)
    re = torch.cos(xt).mean(0) - torch.exp(-t ** 2 / 2)                          # (M, K)
    im = torch.sin(xt).mean(0)
    return n * ((re ** 2 + im ** 2) @ w)                                        # (M,)


def sigreg(z: torch.Tensor, slices: int = 256, knots: int = 17, tmax: float = 3.0,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """SIGReg (LeJEPA): the Epps-Pulley statistic of random 1-D projections of the batch, averaged.

    An isotropic Gaussian is the only distribution whose every 1-D projection is N(0, 1), so driving
    the statistic down along random directions spreads the embeddings out and forbids collapse.

    Parameters
    ----------
    z : (N, D) embeddings of one batch.
    slices : number of random unit directions, redrawn at every call.

    Returns
    -------
    scalar tensor (about 1 for N(0, I) samples, of order N for collapsed ones).
    """
    d = z.shape[1]
    a = torch.randn(d, slices, generator=generator, device="cpu").to(z.device)  # cpu draw: same on any device
    a = a / a.norm(dim=0, keepdim=True)
    return epps_pulley(z.float() @ a, knots=knots, tmax=tmax).mean()


def vicreg_reg(z1: torch.Tensor, z2: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """VICReg's variance (hinge on each dimension's std at 1) and covariance (off-diagonal squared,
    / D) terms, for both branches; the invariance term is the JEPA prediction loss. (N, D) x2 -> scalar."""
    out = 0.0
    for z in (z1, z2):
        z = z.float() - z.float().mean(0)
        std = torch.sqrt(z.var(0) + eps)
        var = F.relu(1 - std).mean()
        c = (z.T @ z) / max(1, z.shape[0] - 1)                  # (D, D)
        off = c - torch.diag(torch.diag(c))
        out = out + 25.0 * var + (off ** 2).sum() / z.shape[1]
    return out / 2


def cov_reg(z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
    """Isotropy in the second moments only: the squared Frobenius distance of each branch's covariance
    from the identity (/ D) plus its squared mean. It asks for what SIGReg asks of the first two moments
    (zero mean, identity covariance) and nothing of the shape, so a discrete world's embedding is not
    pulled toward a Gaussian. (N, D) x2 -> scalar (0 for whitened embeddings)."""
    out = 0.0
    for z in (z1, z2):
        z = z.float()
        mu = z.mean(0)
        zc = z - mu
        c = (zc.T @ zc) / max(1, z.shape[0] - 1)                # (D, D)
        eye = torch.eye(z.shape[1], device=z.device)
        out = out + ((c - eye) ** 2).sum() / z.shape[1] + (mu ** 2).sum()
    return out / 2


def info_nce(p: torch.Tensor, z: torch.Tensor, temperature: float = 0.1, offset: int = 0) -> torch.Tensor:
    """Cross-entropy of picking the right target among the batch: (n, D) predictions vs (N, D) targets,
    prediction i's target being row ``offset + i`` (n < N: this process's rows of a global batch)."""
    p = F.normalize(p.float(), dim=-1)
    z = F.normalize(z.float(), dim=-1)
    logits = p @ z.T / temperature                               # (n, N)
    return F.cross_entropy(logits, offset + torch.arange(len(p), device=p.device))


def expected_ep_gaussian(tmax: float = 3.0, knots: int = 17) -> float:
    """E[epps_pulley] under H0 (same quadrature as epps_pulley): sum_k w_k (1 - exp(-t_k^2))."""
    tot = 0.0
    for k in range(knots):
        t = tmax * k / (knots - 1)
        w = tmax / (knots - 1) * (0.5 if k in (0, knots - 1) else 1.0)
        tot += 2 * w * math.exp(-t * t / 2) * (1 - math.exp(-t * t))
    return tot
