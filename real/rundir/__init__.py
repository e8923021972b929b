"""A real run's directory: who owns it and what a resumed run must agree with
(:mod:`.folder`), the resolved configurations (:mod:`.config`, :mod:`.async_config`),
checkpoints (:mod:`.checkpoint`), resume integrity (:mod:`.resume_check`), checks made before
any model is built (:mod:`.run_checks`), the error for a missing optional extra (:mod:`.extras`) and the trace rows appended per step
(:mod:`.trace_rows`).
"""
