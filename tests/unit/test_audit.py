"""The audit's draw by strata of the fit rows (forgetmap.predict.audit): which examples, how many of each stratum,
and what a probes file records of them, against hand-computed strata and allocations."""

import numpy as np
import pytest

from forgetmap.errors import DataError
from forgetmap.predict.audit import LEAST, allocation, audit_draw, audit_positions, audit_record, strata

N, K = 500, 20


def fit_rows(seed: int = 0):
    rng = np.random.default_rng(seed)
    train = rng.normal(size=(5, N)) * np.where(rng.random(N) < 0.1, 4.0, 1.0)
    return train.astype(np.float32), np.sort(rng.choice(N, K, replace=False))


def test_the_upper_stratum_is_the_tenth_the_fit_rows_forgot_most():
    from helpers import refit_strata

    train, known = fit_rows()
    labels = strata(train, known, 60)
    assert labels.tolist() == refit_strata(train, known).tolist()
    assert (labels[known] == -1).all() and (labels == 1).sum() == round(0.1 * (N - K))


def test_each_stratum_takes_its_neyman_share_and_no_fewer_than_the_least():
    train, known = fit_rows()
    labels = strata(train, known, 60)
    others = labels >= 0
    spread = [train[:, others][:, labels[others] == h].astype(np.float64).std(axis=1).mean() for h in (0, 1)]
    sizes = [(labels == h).sum() for h in (0, 1)]
    upper = round(60 * sizes[1] * spread[1] / (sizes[0] * spread[0] + sizes[1] * spread[1]))
    assert allocation(train[:, others], labels[others], 60).tolist() == [60 - upper, upper]
    flat = np.ones((5, 100))  # every example alike: in proportion to the strata's sizes, at least LEAST
    assert allocation(flat, np.r_[np.zeros(90, int), np.ones(10, int)], 20).tolist() == [20 - LEAST, LEAST]
    audit, drawn_labels = audit_draw(train, known, 60, 3)
    assert (np.diff(audit) > 0).all() and not np.isin(audit, known).any() and len(audit) == 60
    assert [(drawn_labels[audit] == h).sum() for h in (0, 1)] == [60 - upper, upper]
    assert audit.tolist() == audit_draw(train, known, 60, 3)[0].tolist() != audit_draw(train, known, 60, 4)[0].tolist()


def test_a_small_audit_or_every_example_is_one_stratum():
    train, known = fit_rows()
    for size in (0, 2 * LEAST - 1):
        audit, labels = audit_draw(train, known, size, 0)
        assert len(audit) == size and labels.max() == 0
    audit, labels = audit_draw(train, known, N, 0)
    assert audit.tolist() == np.setdiff1d(np.arange(N), known).tolist() and labels.max() == 0


def test_a_probes_files_strata_are_checked_against_the_matrix():
    train, known = fit_rows()
    usable = np.arange(N) * 2  # corpus indices of the usable examples
    audit, labels = audit_draw(train, known, 40, 0)
    chosen = {"audit": usable[audit].tolist(), "audit_strata": audit_record(labels, audit)}
    found, again = audit_positions(chosen, train, known, usable, "probes.parquet")
    assert found.tolist() == audit.tolist() and again.tolist() == labels.tolist()
    assert audit_positions({"audit": chosen["audit"]}, train, known, usable, "p")[1] is None  # a file from before
    other = train.copy()
    other[:, audit[labels[audit] == 1]] = 0.0  # the matrix's fit rows changed: the upper stratum is another
    with pytest.raises(DataError, match="probes.parquet: its audit strata .* rebuild it"):
        audit_positions(chosen, other, known, usable, "probes.parquet")
