"""The completeness proof and what a run reports: the Spark SQL comparison, the Great
Expectations suites, reports and metrics."""
