"""Tests of metadata_log/ and the controller (kraft/): records, quorum, HTTP plane."""
