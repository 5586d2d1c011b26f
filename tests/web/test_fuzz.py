"""A fuzz of the JSON API from its own OpenAPI document (schemathesis): no input gives a 500.

Every operation in the document gets generated cases, valid and invalid. The event streams
are left out (they stay open while a run is active); the stand-in trainer answers any run
the fuzz manages to start.
"""

from __future__ import annotations

from collections import Counter

import hypothesis
import schemathesis
from schemathesis.checks import not_a_server_error

from fakes.web import CPU


def test_no_input_makes_the_api_fail_with_a_server_error(make_client):
    client = make_client(fixture=CPU)
    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
    schema = schema.exclude(path_regex=r"/events$")
    operations = [result.ok() for result in schema.get_all_operations()]
    seen: Counter[str] = Counter()
    statuses: Counter[int] = Counter()

    def fuzz_operation(operation) -> None:
        @hypothesis.given(case=operation.as_strategy())
        @hypothesis.settings(
            max_examples=30,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(hypothesis.HealthCheck),
        )
        def fuzz(case) -> None:
            response = case.call_and_validate(checks=[not_a_server_error])
            seen[operation.label] += 1
            statuses[response.status_code] += 1

        fuzz()

    for operation in operations:
        fuzz_operation(operation)
    assert len(operations) >= 10  # the document describes the whole API
    assert all(seen[op.label] > 0 for op in operations), seen
    assert not [code for code in statuses if code >= 500], statuses
    assert {200, 400, 404, 422} <= set(statuses)  # valid and invalid inputs both got through
