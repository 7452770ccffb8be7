"""Judging the loop: the simulation's report (weekly production AUC of the flywheel against the
static model, a same-budget reference and the all-labels ceiling), and the judgement of each
retraining's alarm."""
