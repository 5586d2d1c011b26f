"""The ViT training guide's checkpoint files (`checkpoints/best_model.pth`,
`checkpoints/checkpoint_epoch_5.pth`): trainforge keeps each as a folder of the same name, and
every command that takes a checkpoint reads the `.pth` spelling as that folder — resume,
evaluate, export and `model.init_from` alike (docs: "Folders, not .pth files")."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from trainforge.engine import checkpoint as ckpt
from trainforge.runfolder import RunFolder, find_run, guide_spelling

REPO = Path(__file__).resolve().parents[2]


def _run_with_checkpoints(root: Path) -> RunFolder:
    folder = RunFolder(root / "run")
    folder.path.mkdir()
    folder.resolved_config.write_text("task: {}\n")
    for name, step in ((ckpt.epoch_name(5), 5), (ckpt.best_name(), 5)):
        ckpt.save_checkpoint(
            folder.checkpoints / name, model_state={"w": torch.full((2,), float(step))},
            state={"s": step}, meta={"name": name, "global_step": step},
            config_yaml="task: {}\n",
        )  # fmt: skip
    return folder


def test_the_pth_spelling_names_the_folder_and_nothing_else(tmp_path):
    folder = _run_with_checkpoints(tmp_path)
    best = folder.checkpoints / ckpt.best_name()
    assert guide_spelling(f"{best}.pth") == best
    assert guide_spelling(folder.checkpoints / "missing.pth").name == "missing.pth"
    real = tmp_path / "weights.pth"
    real.write_bytes(b"x")  # a real file of that name is itself
    assert guide_spelling(real) == real
    assert find_run(f"{best}.pth") == (folder, best)


def test_evaluate_export_and_init_from_read_the_guides_pth_names(tmp_path, capsys, monkeypatch):
    from trainforge.config import load
    from trainforge.evaluate import Request, weights_of
    from trainforge.export import source
    from trainforge.run import init_from

    folder = _run_with_checkpoints(tmp_path)
    best = folder.checkpoints / ckpt.best_name()
    epoch = folder.checkpoints / ckpt.epoch_name(5)

    chosen = weights_of(Request(run=folder.path, checkpoint=f"{ckpt.epoch_name(5)}.pth"))
    assert chosen.folder == epoch
    assert weights_of(Request(run=Path(f"{best}.pth"))).folder == best

    monkeypatch.setattr(source, "_from_checkpoint", lambda folder, run: folder)  # the choice
    assert source.resolve_source(Path(f"{best}.pth")) == best
    assert f"weights: checkpoint {ckpt.weights_file(best)}" in capsys.readouterr().out

    save_file({"w": torch.zeros(2)}, str(folder.model))  # init_from reads the checkpoint named
    config = REPO / "config" / "vit_digits.yaml"
    cfg = load(config, profile="cpu", overrides=[f"model.init_from={epoch}.pth"]).config
    located = init_from.locate(cfg)
    assert located.path == ckpt.weights_file(epoch)


def test_the_export_and_evaluate_commands_accept_the_pth_spelling(tmp_path, monkeypatch):
    """The commands check that the source exists before they read it: that check maps the
    guide's spelling too, or `NAME.pth` is refused as "not found" before it is read."""
    from fakes.in_process import run_main
    from trainforge.errors import UserError
    from trainforge.export import commands, source

    folder = _run_with_checkpoints(tmp_path)
    best = f"{folder.checkpoints / ckpt.best_name()}.pth"
    seen: list[Path] = []
    monkeypatch.setattr(commands, "run_export", lambda source, *a: seen.append(source))
    ran = run_main("export", best, "--format", "onnx", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr

    def chosen(found):
        seen.append(found.folder)
        raise UserError("read", "stop here")

    monkeypatch.setattr(source, "read_source", chosen)
    ran = run_main("evaluate", best, cwd=tmp_path)
    assert "not found" not in ran.stderr, ran.stderr
    assert seen[-1] == folder.checkpoints / ckpt.best_name()
