"""The pre-norm/post-norm depth plot: exact gradient sizes through the last k blocks of
one stack, and its figure."""

from __future__ import annotations

import numpy as np

from resverify.reports import plots


def test_zero_branches_keep_the_pre_norm_gradient_and_shrink_the_post_norm_one() -> None:
    """Gain 0: a pre-norm stack is the identity (ratio exactly 1 at every depth); a post-norm
    stack passes ȳ through N's Jacobian, which removes ȳ's mean and its component along y:
    the ratio is below 1 from depth 1 on."""
    pre = plots.norm_gradient_curve("pre", 3, 7, gain=0.0)
    post = plots.norm_gradient_curve("post", 3, 7, gain=0.0)
    assert pre == (1.0, 1.0, 1.0, 1.0)
    assert post[0] == 1.0 and all(v < 1.0 for v in post[1:]), post


def test_random_branches_keep_pre_norm_gradients_larger_than_post_norm_ones() -> None:
    pre = np.array(plots.norm_gradient_curve("pre", 6, 3))
    post = np.array(plots.norm_gradient_curve("post", 6, 3))
    assert pre[0] == post[0] == 1.0
    assert np.all(pre[3:] > 2 * post[3:]), (pre, post)


def test_norm_depth_is_one_of_the_report_plots() -> None:
    assert "norm_depth" in plots.PLOT_NAMES
    png = plots.render_plots(3)["norm_depth"]
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and b"Software" not in png
