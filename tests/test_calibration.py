"""The zero-shot temperature fitted on validation."""
import numpy as np
import pytest

from captioner.calibration import fit_logit_scale


def test_fitted_scale_matches_the_closed_form_two_class_answer():
    # 80 images whose true class leads by a cosine margin of 0.1, 20 whose true class trails by 0.1: the NLL
    # optimum has sigmoid(0.1 s) = 0.8, so s = ln(4) / 0.1.
    C = np.array([[0.1, 0.0]] * 80 + [[0.0, 0.1]] * 20)
    y = np.zeros(100, int)
    assert fit_logit_scale(C, y) == pytest.approx(np.log(4) / 0.1, rel=1e-4)


def test_more_confident_validation_gives_a_larger_scale():
    C = np.array([[0.1, 0.0]] * 95 + [[0.0, 0.1]] * 5)
    assert fit_logit_scale(C, np.zeros(100, int)) == pytest.approx(np.log(19) / 0.1, rel=1e-4)
