"""``rolloutlab calibrate ...``: a simulator scenario fitted to real logs. The group
and the verl TensorBoard and ServeGen fits are in :mod:`.group`; vLLM measurements in
:mod:`.vllm`; pass rates and the learning law in :mod:`.learning`; grouped per-sample
traces in :mod:`.groups`; multi-turn tables in :mod:`.turns`."""
