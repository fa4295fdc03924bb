"""Generic statistics shared by every study: intervals for shares, paired bootstrap, multiple-comparison
correction, power. Nothing here knows a study, an estimator or a results folder."""
