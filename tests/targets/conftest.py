from __future__ import annotations

import pytest
from tests.targets.login_node import start_login_node


@pytest.fixture
def login_node(tmp_path_factory):
    node = start_login_node(tmp_path_factory.mktemp("login-node"))
    yield node
    node.stop()
