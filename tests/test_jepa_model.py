"""JEPA building blocks: SIGReg's statistic against known values, regularisers, model shapes."""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")


pytestmark = pytest.mark.usefixtures("one_torch_thread")

from captioner.jepa import model as M  # noqa: E402


def _trapezoid_integral(f, tmax=3.0, knots=17):
    t = np.linspace(0, tmax, knots)
    w = np.full(knots, tmax / (knots - 1))
    w[[0, -1]] /= 2
    return float(2 * (w * f(t) * np.exp(-t ** 2 / 2)).sum())


def test_epps_pulley_of_a_point_mass_is_the_closed_form():
    # all N samples at 0: phi_N(t) = 1, so T = N * integral (1 - exp(-t^2/2))^2 w(t) dt exactly
    n = 64
    got = M.epps_pulley(torch.zeros(n, 3)).numpy()
    want = n * _trapezoid_integral(lambda t: (1 - np.exp(-t ** 2 / 2)) ** 2)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    # a point mass at c: |e^{itc} - e^{-t^2/2}|^2 = 1 - 2 cos(tc) e^{-t^2/2} + e^{-t^2}
    c = 1.5
    got = float(M.epps_pulley(torch.full((n, 1), c))[0])
    want = n * _trapezoid_integral(lambda t: 1 - 2 * np.cos(t * c) * np.exp(-t ** 2 / 2) + np.exp(-t ** 2))
    assert got == pytest.approx(want, rel=1e-5)


def test_sigreg_small_for_gaussian_large_for_collapsed():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(512, 32, generator=g)
    stat = float(M.sigreg(z, slices=512, generator=torch.Generator().manual_seed(1)))
    # under H0 the expectation is sum_k w_k (1 - exp(-t_k^2)) ~ 1.05 whatever N is
    assert stat == pytest.approx(M.expected_ep_gaussian(), rel=0.25)
    assert M.expected_ep_gaussian() == pytest.approx(math.sqrt(2 * math.pi) * (1 - 1 / math.sqrt(3)), rel=0.01)
    collapsed = float(M.sigreg(torch.zeros(512, 32) + 0.3, generator=torch.Generator().manual_seed(1)))
    low_rank = float(M.sigreg(torch.randn(512, 2, generator=g) @ torch.randn(2, 32, generator=g) / 4,
                              generator=torch.Generator().manual_seed(1)))
    assert collapsed > 100 * stat
    assert low_rank > 10 * stat
    scaled = float(M.sigreg(3 * z, slices=512, generator=torch.Generator().manual_seed(1)))
    assert scaled > 20 * stat  # the wrong scale is not Gaussian N(0, 1) either


def test_sigreg_gradient_spreads_a_collapsed_batch():
    w = torch.nn.Parameter(torch.randn(128, 4, generator=torch.Generator().manual_seed(0)) * 0.01)
    opt = torch.optim.Adam([w], lr=0.1)
    first = None
    for i in range(60):
        loss = M.sigreg(w, slices=32, generator=torch.Generator().manual_seed(i))
        first = float(loss.detach()) if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first > 30 and float(loss.detach()) < 2.0
    cov = np.cov(w.detach().numpy().T)
    assert np.all(np.abs(np.diag(cov) - 1) < 0.35)


def test_vicreg_and_infonce_known_values():
    z = torch.randn(4096, 8, generator=torch.Generator().manual_seed(0))
    assert float(M.vicreg_reg(z, z)) < 0.3                    # unit variance, near-zero covariance
    assert float(M.vicreg_reg(z * 0, z * 0)) == pytest.approx(25.0 * (1 - math.sqrt(1e-4)), rel=1e-4)
    # identical, well separated predictions and targets: InfoNCE ~ 0; all equal: log N
    e = torch.eye(16) * 10
    assert float(M.info_nce(e, e, temperature=0.1)) < 1e-3
    assert float(M.info_nce(torch.ones(16, 4), torch.ones(16, 4))) == pytest.approx(math.log(16), rel=1e-5)


def test_cov_reg_known_values():
    # exactly whitened (orthonormal columns scaled to unit covariance, zero mean): 0
    q, _ = torch.linalg.qr(torch.randn(256, 8, generator=torch.Generator().manual_seed(0)))
    q = q - q.mean(0)
    q, _ = torch.linalg.qr(q)
    w = q * math.sqrt(255)
    assert abs(float(M.cov_reg(w, w))) < 1e-8
    # covariance 4I and mean 1 in every coordinate: (4-1)^2 * D / D + D * 1^2 = 9 + 8
    assert float(M.cov_reg(2 * w + 1, 2 * w + 1)) == pytest.approx(17.0, rel=1e-5)
    # collapsed: covariance 0 -> ||I||^2 / D = 1, plus the mean; averaged over the two branches
    assert float(M.cov_reg(torch.zeros(64, 8), torch.zeros(64, 8) + 0.5)) == pytest.approx((1 + 1 + 8 * 0.25) / 2)


def test_objective_accepts_cov_and_rejects_unknown():
    text = M.TextConfig(dim=32, layers=1, heads=2, max_len=16, embed_dim=8, proj_hidden=16)
    ids = torch.randint(1000, 2000, (6, 10))
    mask = torch.ones(6, 10, dtype=torch.bool)
    m = M.build_model("text-jepa", text, obj=M.ObjectiveConfig(reg="cov", pred_hidden=16))
    out = m((ids, mask), (ids.flip(1), mask))
    assert torch.isfinite(out["loss"]) and float(out["loss"].detach()) > 0
    bad = M.build_model("text-jepa", text, obj=M.ObjectiveConfig(reg="whiten", pred_hidden=16))
    with pytest.raises(ValueError, match="sigreg, vicreg, cov or infonce"):
        bad((ids, mask), (ids.flip(1), mask))


@pytest.mark.parametrize("kind", M.KINDS)
def test_models_build_and_embed_shapes(kind):
    text = M.TextConfig(dim=32, layers=1, heads=2, max_len=16, embed_dim=8, proj_hidden=16)
    image = M.ImageConfig(image_size=16, channels=[8, 16], pool="flatten", embed_dim=8, proj_hidden=16)
    m = M.build_model(kind, text, image, M.ObjectiveConfig(pred_hidden=16, sigreg_slices=16))
    if kind == "image-jepa":
        x = torch.rand(4, 3, 16, 16)
        assert m.embed(x).shape == (4, 8)
        out = m((x,), (x.flip(-1),))
    else:
        ids = torch.randint(1000, 2000, (4, 10))
        mask = torch.ones(4, 10, dtype=torch.bool)
        mask[0, 6:] = False
        assert m.embed(ids, mask).shape == (4, 8 if kind == "text-jepa" else 32)
        out = m((ids, mask), (ids, mask)) if kind == "text-jepa" else m(ids, mask)
    assert out["loss"].ndim == 0 and torch.isfinite(out["loss"])


def test_padding_does_not_change_text_embeddings():
    # a right-padded row must embed exactly as the unpadded one (bidirectional mask and causal mask)
    text = M.TextConfig(dim=32, layers=2, heads=2, max_len=16, embed_dim=8, proj_hidden=16)
    for kind in ("text-jepa", "ntp"):
        m = M.build_model(kind, text).eval()
        ids = torch.randint(1000, 2000, (1, 7))
        padded = torch.cat([ids, torch.zeros(1, 5, dtype=torch.long)], 1)
        mask = torch.cat([torch.ones(1, 7), torch.zeros(1, 5)], 1).bool()
        with torch.no_grad():
            a = m.embed(ids, torch.ones(1, 7, dtype=torch.bool))
            b = m.embed(padded, mask)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_ntp_last_token_pooling_is_the_state_at_the_last_real_token():
    text = M.TextConfig(dim=32, layers=2, heads=2, max_len=16)
    m = M.NextTokenLM(text).eval()
    ids = torch.randint(1000, 2000, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 5:] = False                                  # the second text has 5 real tokens
    with torch.no_grad():
        h = m.backbone(ids, mask)
        last = m.embed(ids, mask, pool="last")
        alone = m.embed(ids[1:, :5], mask[1:, :5], pool="last")
        causal_prefix = m.embed(ids[:1, :5], mask[:1, :5], pool="last")
    torch.testing.assert_close(last[0], h[0, 8])
    torch.testing.assert_close(last[1], h[1, 4])
    torch.testing.assert_close(last[1:], alone, atol=1e-5, rtol=1e-5)           # padding does not matter
    # causal: the state at token 5 of the first text has not seen tokens 6-9, so it is its prefix's last
    torch.testing.assert_close(causal_prefix[0], h[0, 4], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(m.embed(ids, mask), m.embed(ids, mask, pool="mean"))
    with pytest.raises(ValueError, match="unknown NTP pooling 'max'"):
        m.embed(ids, mask, pool="max")


def test_ntp_restricted_vocab_equals_full_softmax_over_that_vocab():
    text = M.TextConfig(dim=16, layers=1, heads=2, max_len=8, vocab_size=50)
    m = M.NextTokenLM(text)
    ids = torch.tensor([[3, 5, 7, 5, 3, 9]])
    mask = torch.ones_like(ids, dtype=torch.bool)
    h = m.backbone(ids, mask)
    vocab = torch.tensor([3, 5, 7, 9])
    logits = h[:, :-1] @ m.backbone.tok.weight[vocab].T
    tgt = torch.tensor([[1, 2, 1, 0, 3]])  # positions of 5, 7, 5, 3, 9 in vocab
    want = torch.nn.functional.cross_entropy(logits.reshape(-1, 4), tgt.reshape(-1))
    m.restrict_vocab([9, 3, 7, 5, 3])
    torch.testing.assert_close(m(ids, mask)["loss"], want)


def test_ema_target_moves_towards_online():
    text = M.TextConfig(dim=16, layers=1, heads=2, max_len=8, embed_dim=4, proj_hidden=8)
    m = M.TextJEPA(text, M.ObjectiveConfig(target="ema", ema=0.5, pred_hidden=8))
    p_on = next(m.encoder.parameters())
    p_t = next(m.target.parameters())
    assert not p_t.requires_grad and torch.equal(p_on, p_t)
    with torch.no_grad():
        p_on.add_(1.0)
    before = p_t.clone()
    m.update_target()
    torch.testing.assert_close(p_t, 0.5 * before + 0.5 * p_on.detach())


def test_coords_pool_reads_where_a_channel_fires():
    # mean+coords: per channel the global average, then the soft-argmax x and y on the final map; a sharp
    # blob in the top-right corner of every channel's map gives x ~ +0.75, y ~ -0.75 on a 4 x 4 grid
    b = M.CNNBackbone(M.ImageConfig(image_size=16, channels=[4, 8], pool="mean+coords"))
    assert b.out_dim == 3 * 8
    h = torch.zeros(2, 8, 4, 4)
    h[:, :, 0, 3] = 50.0
    b.net = torch.nn.Identity()                  # feed the map itself
    out = b(h)
    assert torch.allclose(out[:, :8], h.mean((2, 3)))
    assert torch.allclose(out[:, 8:16], torch.full((2, 8), 0.75), atol=1e-4)     # x: the right-most cell
    assert torch.allclose(out[:, 16:], torch.full((2, 8), -0.75), atol=1e-4)     # y: the top row
    with pytest.raises(ValueError, match="mean\\+coords"):
        M.CNNBackbone(M.ImageConfig(pool="max"))
