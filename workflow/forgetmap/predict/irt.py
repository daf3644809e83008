"""Item response theory as a completion method: tinyBenchmarks' way of reading a benchmark from a few items.

A multidimensional two-parameter logistic model (Polo et al., 2024, after Reckase): row r (a model, a
checkpoint) is right on item i with probability

    p_ri = sigmoid(theta_r . alpha_i + beta_i)

with D-dimensional abilities theta and discriminations alpha, and an easiness beta per item. `fit` learns
alpha, beta (and the fit rows' theta) by penalised maximum likelihood over the fit rows (values in [0, 1]: a
seed mean counts as a soft label); `predict` places each new row's ability by the maximum a posteriori fit to
its known items (a standard normal prior on theta, the items fixed) and returns every item's probability.
tinyBenchmarks' p-IRT estimate of a benchmark's accuracy is then the mean over items of the measured value
where scored and the probability elsewhere: what `correctness.forecast.complete_rows` gives with this method.

tinyBenchmarks fits D = 10 on hundreds of models; a map of a dozen fine-tunes supports far fewer, so D
defaults to 2 (the rows a map has decide; BENCHMARKS.md measures it).
"""

from __future__ import annotations

import numpy as np

from .interface import CompletionMethod


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # overflow-free


class ItemResponse(CompletionMethod):
    name = "irt"

    def __init__(self, dims: int = 2, reg: float = 0.1, max_iter: int = 500, seed: int = 0):
        self.dims = dims
        self.reg = reg
        self.max_iter = max_iter
        self.seed = seed

    def fit(self, train):
        from scipy.optimize import minimize

        y = np.asarray(train, dtype=np.float64)
        m, n = y.shape
        d = self.dims
        observed = np.isfinite(y)
        target = np.where(observed, y, 0.0)
        count = max(1, int(observed.sum()))
        rng = np.random.default_rng(self.seed)
        start = np.concatenate([rng.normal(0, 0.1, m * d), rng.normal(0, 0.1, n * d),
                                _logit(np.clip(np.nanmean(y, axis=0), 0.02, 0.98))])

        def unpack(x):
            return x[:m * d].reshape(m, d), x[m * d:(m + n) * d].reshape(n, d), x[(m + n) * d:]

        def loss(x):
            theta, alpha, beta = unpack(x)
            p = _sigmoid(theta @ alpha.T + beta)
            eps = 1e-12
            nll = -np.where(observed, target * np.log(p + eps) + (1 - target) * np.log(1 - p + eps), 0.0).sum() / count
            penalty = self.reg * (np.sum(theta ** 2) / m + np.sum(alpha ** 2) / n)
            residual = np.where(observed, p - target, 0.0) / count
            grad_theta = residual @ alpha + 2 * self.reg * theta / m
            grad_alpha = residual.T @ theta + 2 * self.reg * alpha / n
            grad_beta = residual.sum(axis=0)
            return nll + penalty, np.concatenate([grad_theta.ravel(), grad_alpha.ravel(), grad_beta])

        solved = minimize(loss, start, jac=True, method="L-BFGS-B", options={"maxiter": self.max_iter})
        self.theta_, self.alpha_, self.beta_ = unpack(solved.x)
        return self

    def ability(self, columns: np.ndarray, values: np.ndarray) -> np.ndarray:
        """The MAP ability (D,) of a row from its values at `columns`: Newton steps on the logistic likelihood
        with a standard normal prior (concave: a few steps converge)."""
        alpha, beta = self.alpha_[columns], self.beta_[columns]
        y = np.asarray(values, dtype=np.float64)
        keep = np.isfinite(y)
        alpha, beta, y = alpha[keep], beta[keep], y[keep]
        theta = np.zeros(self.dims)
        for _ in range(50):
            p = _sigmoid(alpha @ theta + beta)
            gradient = alpha.T @ (y - p) - theta
            hessian = -(alpha.T * (p * (1 - p))) @ alpha - np.eye(self.dims)
            step = np.linalg.solve(hessian, gradient)
            theta = theta - step
            if np.abs(step).max() < 1e-10:
                break
        return theta

    def predict(self, known_columns, known_values):
        known_columns = np.asarray(known_columns)
        out = np.empty((len(known_columns), len(self.beta_)), dtype=np.float32)
        for t, (columns, values) in enumerate(zip(known_columns, np.asarray(known_values))):
            out[t] = _sigmoid(self.alpha_ @ self.ability(columns, values) + self.beta_)
        return out


def _logit(p):
    return np.log(p) - np.log1p(-p)
