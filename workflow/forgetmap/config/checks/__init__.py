"""Every check of a config, section by section; each error names the key, the value and what is allowed.

`resolve` (the package) runs the checks a config alone decides. A few need facts read from the data
(the corpus's size, whether its examples carry answers, a model's splits): the plan reads those and
calls the checks here, so a bad config still fails before any job, and from one place.

Each section has its module, as the schema does: common (the key a file came from, a key given twice),
data (corpora and tasks), models, prediction (and the forecast and explorer), mitigation.
"""

from .common import RESERVED_RUNS, about, check_duplicate_keys
from .data import check_extraction, check_tasks, check_upstream
from .mitigation import (ARENA_KEYS, ARM_KEYS, check_arm_keys, check_arms, check_heldout,
                         check_mitigation_tasks)
from .models import (LEAST_COVER, check_cells, check_checkpoint_files, check_checkpoints, check_fractional,
                     check_logged_names, check_logs, check_models, check_processes)
from .prediction import (check_explorer, check_forecast, check_forecast_count, check_known_counts, check_methods,
                         check_splits)

__all__ = ["ARENA_KEYS", "ARM_KEYS", "LEAST_COVER", "RESERVED_RUNS", "about", "check_arm_keys", "check_arms",
           "check_cells", "check_checkpoint_files", "check_fractional",
           "check_checkpoints", "check_duplicate_keys", "check_explorer", "check_extraction", "check_forecast",
           "check_forecast_count", "check_heldout", "check_known_counts", "check_logged_names", "check_logs",
           "check_methods", "check_mitigation_tasks", "check_models", "check_processes", "check_splits",
           "check_tasks", "check_upstream"]
