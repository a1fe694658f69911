"""Adversarial training on word vectors: the step against the maths written out in float64."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from highwaynet.models.sentence import ENCODERS, SentenceClassifier
from highwaynet.recipes.sentences import SentenceConfig
from highwaynet.training import SentenceTask, TrainConfig
from highwaynet.training.adversarial import adversarial_loss, word_embedding


class MeanOfWords(nn.Module):
    """Word vectors, their mean over each sentence's real words, a linear classifier: small enough to
    differentiate by hand."""

    def __init__(self, vocab: int, dim: int, classes: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim, padding_idx=0, dtype=torch.float64)
        self.classifier = nn.Linear(dim, classes, dtype=torch.float64)

    def forward(self, tokens, lengths):
        valid = (tokens != 0).unsqueeze(-1)
        return self.classifier((self.embedding(tokens) * valid).sum(1) / lengths[:, None])


def batch():
    torch.manual_seed(0)
    lengths = torch.tensor([3, 5, 1, 4])
    tokens = torch.randint(1, 20, (4, 5)) * (torch.arange(5)[None] < lengths[:, None])
    return tokens, lengths, torch.tensor([0, 2, 1, 2])


def by_hand(model: MeanOfWords, tokens, lengths, y, epsilon):
    """Clean logits and loss, the step r and the adversarial loss, each term written out."""
    W, b = model.classifier.weight.detach(), model.classifier.bias.detach()
    e = model.embedding.weight.detach()[tokens]                            # (B, T, E)
    m = (tokens != 0).double().unsqueeze(-1)
    n = lengths.double()[:, None]
    B, E = tokens.shape[0], e.shape[-1]

    def logits_of(words):
        return (words * m).sum(1) / n @ W.T + b

    logits = logits_of(e)
    p = torch.exp(logits - logits.logsumexp(-1, keepdim=True))
    onehot = torch.eye(W.shape[0], dtype=torch.float64)[y]
    loss = -(onehot * p.log()).sum(-1).mean()
    g = m / n[:, :, None] * ((p - onehot) @ W)[:, None, :] / B             # d loss / d e
    scale = ((e ** 2 * m).sum((1, 2)) / (lengths.double() * E)).sqrt()     # rms of each sentence's words
    r = epsilon * scale[:, None, None] * g / g.flatten(1).norm(dim=1)[:, None, None]
    adv = logits_of(e + r)
    q = adv - adv.logsumexp(-1, keepdim=True)
    return logits, loss, r, -(onehot * q).sum(-1).mean()


def test_adversarial_loss_matches_the_maths():
    model = MeanOfWords(20, 6, 3)
    tokens, lengths, y = batch()
    logits, loss, adversarial = adversarial_loss(model, (tokens, lengths), lambda z: F.cross_entropy(z, y), 0.7,
                                                 valid=tokens != 0)
    want_logits, want_loss, r, want_adv = by_hand(model, tokens, lengths, y, 0.7)
    torch.testing.assert_close(logits, want_logits)
    torch.testing.assert_close(loss, want_loss)
    torch.testing.assert_close(adversarial, want_adv)
    assert adversarial > loss  # the step goes against the model
    # the step's length: epsilon times each sentence's word-vector scale
    e = model.embedding.weight.detach()[tokens]
    assert torch.allclose(r.flatten(1).norm(dim=1), 0.7 * (e.square().sum((1, 2)) / (lengths * 6)).sqrt())
    assert not model.embedding._forward_hooks  # the hooks lived for the step only


def test_the_step_is_a_constant_of_the_gradient():
    # d/dθ [L(θ) + L(θ; e + r)] with r held fixed: were r differentiated, the gradients would differ.
    model = MeanOfWords(20, 6, 3)
    tokens, lengths, y = batch()
    task = SentenceTask({"train": ([], torch.tensor([]))}, adversarial=0.7)
    total, stats = task.step(model.train(), (tokens, lengths, y))
    total.backward()
    got = [p.grad.clone() for p in model.parameters()]
    _, want_loss, r, _ = by_hand(model, tokens, lengths, y, 0.7)
    model.zero_grad()
    clean = F.cross_entropy(model(tokens, lengths), y)
    hook = model.embedding.register_forward_hook(lambda module, inputs, output: output + r)
    (clean + F.cross_entropy(model(tokens, lengths), y)).backward()
    hook.remove()
    for a, b in zip(got, model.parameters(), strict=True):
        torch.testing.assert_close(a, b.grad)
    # the reported loss is the clean one, summed over the batch
    torch.testing.assert_close(stats["loss"], want_loss.float() * 4, check_dtype=False)
    assert stats["n"] == 4


def test_evaluation_and_epsilon_zero_take_the_plain_step():
    model = MeanOfWords(20, 6, 3)
    tokens, lengths, y = batch()
    plain = SentenceTask({"train": ([], torch.tensor([]))})
    adversarial = SentenceTask({"train": ([], torch.tensor([]))}, adversarial=0.7)
    for task, mode in ((adversarial, False), (plain, True)):
        loss, _ = task.step(model.train(mode), (tokens, lengths, y))
        torch.testing.assert_close(loss, F.cross_entropy(model(tokens, lengths), y), check_dtype=False)


@pytest.mark.parametrize("encoder", ENCODERS)
def test_a_sentence_classifier_takes_the_step(encoder):
    # The real models: the one embedding is found, and the step moves the loss up.
    torch.manual_seed(0)
    model = SentenceClassifier(30, 3, encoder=encoder, embed_dim=8, hidden_size=4, dropout=0.0).double()
    tokens, lengths, y = batch()
    _, loss, adversarial = adversarial_loss(model, (tokens, lengths), lambda z: F.cross_entropy(z, y), 1.0,
                                            valid=tokens != 0)
    assert word_embedding(model) is model.embedding and adversarial > loss


def test_errors_say_what_is_wrong():
    with pytest.raises(ValueError, match="adversarial is a step length >= 0"):
        SentenceTask({}, adversarial=-1.0)
    with pytest.raises(ValueError, match="SentenceConfig.adversarial must be at least 0.0, got -0.5"):
        SentenceConfig(adversarial=-0.5)
    with pytest.raises(ValueError, match="a model with one nn.Embedding; Linear has 0"):
        word_embedding(nn.Linear(2, 2))
    two = nn.Sequential(nn.Embedding(5, 2), nn.Embedding(5, 2))
    with pytest.raises(ValueError, match="Sequential has 2"):
        word_embedding(two)

    class Twice(MeanOfWords):  # reads its word vectors twice: which one would the step move?
        def forward(self, tokens, lengths):
            self.embedding(tokens)
            return super().forward(tokens, lengths)

    tokens, lengths, y = batch()
    with pytest.raises(RuntimeError, match="nn.Embedding ran 2 times in one forward"):
        adversarial_loss(Twice(20, 6, 3), (tokens, lengths), lambda z: F.cross_entropy(z, y), 1.0, tokens != 0)


def test_a_compiled_model_is_refused():
    # Its graphs free their buffers after one backward, and the clean loss is differentiated twice.
    model, (tokens, lengths, y) = MeanOfWords(20, 6, 3), batch()
    with pytest.raises(ValueError, match="does not combine with torch.compile"):
        adversarial_loss(torch.compile(model), (tokens, lengths), lambda z: F.cross_entropy(z, y), 1.0, tokens != 0)
    with pytest.raises(ValueError, match="does not combine with compile"):
        SentenceConfig(adversarial=1.0, train=TrainConfig(compile=True))
