"""Your pipelines: one module per pipeline, each defining it with `dataflow_core.api`
(`pipeline(...)`, `stage(...)`; docs/write-your-own-pipeline.md). Every module in this package is
imported when a pipeline is looked up by name (`dataflow pipelines` lists them); modules
elsewhere can be added with `DATAFLOW_PIPELINES=package.module,...`.

`billing` and `ad_sessions` are the paper's two examples over the sample `video_events`.
"""
