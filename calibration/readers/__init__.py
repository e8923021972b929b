"""Readers of what runs wrote: verl TensorBoard scalars (:mod:`.verl_tb`), grouped
per-sample files in JSONL, CSV or parquet (:mod:`.grouped`, :mod:`.grouped_records`) and a
run's learning curve (:mod:`.run_curve`). Every bad row is an error naming file, row and field.
"""
