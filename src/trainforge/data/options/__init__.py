"""The built-in datasets' options, one module per dataset: its fields are what `data.options`
takes when `data.dataset` names it (as litgpt keeps one module per data set whose fields are
its options). `trainforge.data.catalog` registers each dataset with its options class.

Each module imports pydantic and `trainforge.options` only, so the catalogue (and with it
`trainforge validate`) stays free of torch.
"""
