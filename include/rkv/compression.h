// Decode-time KV-cache compression policies (docs/METHODS.md, spec ALGORITHMS.md 1-4).
//
// A compression is a pure function of a small view of ONE layer of ONE sequence (DESIGN.md
// property 3): window queries, cached keys, per-entry policy state and parameters go in; the
// entries to keep per KV head (and their new state) come out. Nothing here touches cache memory:
// the caller's cache applies the returned Selection (plan, then apply). The function needs no
// model, which is what lets the golden vectors in ../shared/golden/compression test every policy.
//
// Typical engine use, once per layer when a compression is due:
//
//   rkv::LayerView view;                      // pointers into the engine's own arrays, no copies
//   view.q_heads = 14; view.kv_heads = 2; view.head_dim = 64; view.n_all = cache_len;
//   view.window = params.window; view.queries = query_ring;   // [q_heads][window][head_dim]
//   view.keys = {k_head0, k_head1};           // each [n_all][head_dim], post-RoPE
//   view.state = {s_head0, s_head1};          // each [n_all], kNoState where none
//   rkv::Selection plan = rkv::compress_layer(view, params);
//   if (plan.compressed) cache.compact(plan);  // gathers keys/values/positions/state per head
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rkv {

class ThreadPool;

// ---- methods and parameters ---------------------------------------------------------------------

// The methods. Each has one record in its own file, src/compress/methods/<name>.cpp, listed in
// the registry (src/compress/registry.cpp, in this order); adding a method is one value here, one
// file and one registry row (docs/ARCHITECTURE.md, "Adding a method"). Outside src/compress and
// this header nothing names a value: the engine, server and tools ask the record (method_info,
// CompressionParams::info) for what they need, by name or by property.
enum class Method { fullkv, streamingllm, h2o, snapkv, rkv, gkv, skipkv, random, triattention };
// G-KV's global-score smoothing (ALGORITHMS.md 4, `gkv`). `none` turns the score cache off (and
// with it the max-normalisations), as G-KV's `enable_score_cache=False` does.
enum class Smoothing { none, max, mean, sum };
// When the engine compresses (ALGORITHMS.md 1): every `buffer` tokens, or on line-break tokens.
enum class Trigger { every_buffer, newline };
// TriAttention's selection (TRIATTENTION.md 5.4): per_head, the paper's (one set per KV head for
// every layer); union (one set for every head and layer); per_layer_perhead (a set per layer and
// KV head).
enum class TriSelection { per_head, union_all, per_layer_perhead };

// When a method decides what to keep. per_layer: as each layer's keys are appended, from that
// layer alone. whole_pass: once per step for all layers together, after the last layer of the
// forward pass (triattention: its per_head and union selections combine every layer's scores).
enum class Timing { per_layer, whole_pass };

// Names as used on the command line and in JSON ("rkv", "gkv", "max", "every-buffer", ...).
// The parse functions throw rkv::Error naming the accepted values.
Method parse_method(std::string_view name);
std::string_view method_name(Method method);
Smoothing parse_smoothing(std::string_view name);
std::string_view smoothing_name(Smoothing smoothing);
Trigger parse_trigger(std::string_view name);
std::string_view trigger_name(Trigger trigger);
TriSelection parse_selection(std::string_view name);
std::string_view selection_name(TriSelection selection);

struct MethodInfo;

// Per-entry policy state value meaning "none" (e.g. a gkv entry without a global score yet).
inline constexpr float kNoState = std::numeric_limits<float>::quiet_NaN();
inline bool has_state(float value) {
  return !std::isnan(value);
}

// Every parameter of ALGORITHMS.md 1, 4 and 5. Member defaults are the `rkv` method's; use
// CompressionParams::defaults(method) for another method's preset (e.g. gkv: window 16,
// lambda 0.5, kernel 5).
struct CompressionParams {
  Method method = Method::rkv;
  int budget = 1024;    // entries kept per KV head after a compression, window included
  int buffer = 128;     // new tokens accepted between compressions (engine; cache = budget+buffer)
  int window = 8;       // observation window alpha: queries used for scoring, never evicted
  int sinks = 4;        // streamingllm: leading tokens always kept
  int kernel = 7;       // 1-D max-pooling kernel (odd; 1 = none). gkv pools only with `pooling`
  float lambda = 0.1f;  // rkv / gkv: score = lambda * importance - (1 - lambda) * redundancy
  float threshold = 0.5f;  // redundancy: cosine above which a key counts as a near-duplicate
  Smoothing smoothing = Smoothing::max;  // gkv
  float decay = 0.8f;                    // gkv decay a of the global score
  bool redundancy = true;                // gkv: subtract the (normalised) redundancy
  bool pooling = false;                  // gkv: max-pool the global score with `kernel`
  bool disable_norm = false;             // gkv: skip both max-normalisations
  std::optional<float> ratio;            // gkv: budget grows to ratio * sequence length when larger
  std::optional<float> shift_gamma;      // gkv: add gamma * (unbiased std over window rows) [200]
  Trigger trigger = Trigger::every_buffer;  // engine: when to compress
  bool think_only = false;                  // engine: stop compressing after </think>
  // skipkv (ALGORITHMS.md 5). score = sigma * I - (1 - sigma) * R - penalty(sentence).
  float sigma = 0.1f;
  // skipkv: sentence i is redundant when a later sentence's embedding has cosine > tau with it.
  float tau = 0.95f;
  // skipkv and steering: tokens whose text is exactly one of these end a sentence (a run of
  // them ends one sentence); default: the line breaks of ALGORITHMS.md 1.
  std::vector<std::string> delimiters = default_sentence_delimiters();
  // skipkv and steering: a sentence containing one of these (case-sensitive substrings) is
  // non-execution (reflection or transition).
  std::vector<std::string> keywords = default_sentence_keywords();
  // random: the seed of its draws. The entries a compression keeps depend only on the seed, the
  // layer, the KV head and the sequence length, so a run is reproducible.
  std::uint32_t seed = 0;
  // triattention (TRIATTENTION.md; `buffer` is its divide_length: the cache grows to budget +
  // buffer, then a compression cuts it back to budget, the prompt included and pinned).
  TriSelection selection = TriSelection::per_head;
  bool normalize = true;   // z-score each (layer, query head) row over the generated entries
  int offset_max = 65536;  // future distances 1, 2, 4, ... up to this one are averaged over

  static std::vector<std::string> default_sentence_delimiters();
  static std::vector<std::string> default_sentence_keywords();

  // The preset of `method`: its defaults as listed by method_table().
  static CompressionParams defaults(Method method);
  // The same by the method's name ("rkv"); throws rkv::Error naming the methods for another.
  static CompressionParams defaults(std::string_view method_name);
  // No compression: the preset of the method whose record says compresses = false (fullkv).
  static CompressionParams none();

  // The record of `method` (method_info(method)): what the engine asks instead of the name.
  const MethodInfo& info() const;

  // Throws rkv::Error naming the first invalid setting.
  void validate() const;

  // The budget in force for a sequence of `seq_len` tokens (grows with `ratio`).
  int budget_for(std::int64_t seq_len) const;

  // Sets one parameter by its table name (see compression_param_table()) from text, e.g.
  // set("budget", "512"), set("smoothing", "mean"), set("ratio", "none"). Throws rkv::Error for
  // an unknown name or a value that does not parse; call validate() after the last set().
  void set(std::string_view name, std::string_view value);

  // All parameters as a JSON object (optional ones as null when unset).
  std::string to_json() const;
};

// One settable parameter: its name for CompressionParams::set, the CLI flag that exposes it,
// and a one-line help text (the single table that CLI, server and docs share).
struct ParamInfo {
  std::string_view name;
  std::string_view flag;
  std::string_view help;
};
std::span<const ParamInfo> compression_param_table();

// A list setting (delimiters, keywords) as the comma list CompressionParams::set reads: commas,
// backslashes, newlines, tabs and carriage returns escaped.
std::string format_text_list(const std::vector<std::string>& items);

// What a method reads, checked against each LayerView before scoring (a composition can never
// silently read data the caller did not provide), and what the engine must provide for it.
struct StageNeeds {
  bool window_queries = false;  // LayerView::queries
  bool keys = false;            // LayerView::keys
  bool entry_state = false;     // LayerView::state required: a view without it is an error (h2o)
  bool step_attention = false;  // accumulate_h2o() after every decoding step
  bool positions = false;       // LayerView::positions (skipkv: the sentence of each entry)
  // LayerView::state is read when given: the engine passes the cache's per-entry state (gkv: the
  // previous global scores; h2o: the accumulators). Implied by entry_state.
  bool reads_entry_state = false;
  // The text of every token (sentence boundaries and keywords): the engine needs the tokenizer.
  bool token_text = false;
  // Sentence embeddings from the final hidden states (skipkv: the mean over each sentence's
  // tokens, whose cosines give LayerView::position_penalty). Implies token_text and positions.
  bool final_hidden = false;
  // The model's calibration statistics of its pre-RoPE queries (triattention; `rkv calibrate`):
  // a request without them is refused.
  bool query_stats = false;
};

// A method's record ("presets are data"): `rkv methods` prints the table. Each record is built in
// its own file, src/compress/methods/<name>.cpp; the parts the compress library keeps to itself
// (the stages it runs, its own validation) are in src/compress/registry.h.
struct MethodInfo {
  Method method = Method::fullkv;
  std::string_view name;
  std::string_view summary;
  std::string_view spec;  // sections of ALGORITHMS.md
  StageNeeds needs;
  // True for methods that follow the R-KV reference's `n_all >= budget` test (only matters in
  // score_and_select; compress_layer always uses spec 1's `n_all > budget`).
  bool reference_compresses_at_budget = false;
  CompressionParams defaults;
  // The parameters (compression_param_table names) this method reads; the others are ignored.
  // A method that reads `window` keeps that many recent entries: validate() wants budget > window
  // and compress_layer at least `window` entries.
  std::vector<std::string_view> params;
  // False only for a method that never evicts (fullkv): the engine sizes its cache for the whole
  // sequence and never plans a compression.
  bool compresses = true;
  // The per-entry state of a new cache entry (gkv: kNoState, no global score yet; else 0, where
  // h2o's accumulators start).
  float initial_state = 0.0f;
  Timing timing = Timing::per_layer;
  // Keeps every prompt entry and counts them in its budget (triattention): Engine::prepare
  // refuses a prompt of budget entries or more.
  bool pins_prompt = false;
  // Whether `rkv generate --dump-case` can write its compressions as golden case files: only
  // methods without per-entry state or sentence penalties, which the case format cannot hold.
  bool case_dump = false;
  // The HeadDiagnostics vectors its compressions may fill (traces, policy-run, case dumps), by
  // member name in declaration order; others stay empty. gkv fills shift_std and local_shifted
  // only with shift_gamma, local_normalized only with a score cache, old_score only with state.
  std::vector<std::string_view> trace_fields;

  bool reads(std::string_view param) const;
};
// The records in registry order (the enum's).
std::span<const MethodInfo> method_table();
const MethodInfo& method_info(Method method);
// By name; throws rkv::Error naming the methods for an unknown one.
const MethodInfo& method_info(std::string_view name);
// The table as JSON: [{"name", "summary", "spec", "needs", "defaults": {...}, "compresses",
// "initial_state" (null: kNoState), "timing", "case_dump", "trace_fields"}, ...], where
// "defaults" lists only the parameters the method reads.
std::string methods_json();
// The table as the Markdown table docs/METHODS.md shows (`rkv methods --markdown`; a test checks
// that the document holds exactly this text).
std::string methods_markdown();

// ---- the view, the result -----------------------------------------------------------------------

// One layer of one sequence. All KV heads hold n_all entries, oldest first; the window is the
// last `window` entries. Pointers are borrowed for the duration of the call.
struct LayerView {
  int q_heads = 0;  // query heads; query head j belongs to KV head j / (q_heads / kv_heads)
  int kv_heads = 0;
  int head_dim = 0;
  int n_all = 0;   // entries cached per KV head
  int window = 0;  // rows of `queries` (must equal params.window for query-reading methods)
  std::int64_t seq_len = 0;  // tokens of the sequence so far (for `ratio`); 0 = n_all
  int layer = 0;             // which layer (random: part of what seeds its draws)

  const float* queries = nullptr;  // [q_heads][window][head_dim], oldest first, post-RoPE
  std::vector<const float*> keys;  // [kv_heads] -> [n_all][head_dim], post-RoPE
  // [kv_heads] -> [n_all] original positions. Required by skipkv (the sentence of an entry is
  // found from its position); optional otherwise (traces).
  std::vector<const std::int32_t*> positions;
  // skipkv: [any size] the penalty of the sentence each ORIGINAL POSITION belongs to (0 where
  // none; positions at or beyond size() count as 0). Empty: no penalties yet. Indexing by
  // position means eviction never needs to re-map sentence spans into cache indices.
  std::span<const float> position_penalty;
  // [kv_heads] -> [n_all] per-entry policy state, kNoState where none. Optional for gkv (empty =
  // no entry has a global score yet); required for h2o (the attention accumulators).
  std::vector<const float*> state;
};

// What to keep. The caller's cache gathers, per KV head, the entries kept[h] (in that order) of
// keys, values, positions and replaces their state by new_state[h].
struct Selection {
  bool compressed = false;  // false: keep everything as it is (kept = 0..n_all-1, state as is)
  std::vector<std::vector<std::int32_t>> kept;  // [kv_heads][kept]: indices, ASCENDING (spec 1.3)
  std::vector<std::vector<float>> new_state;    // [kv_heads][kept]: state to store per kept entry
};

// Intermediate vectors of one compression, per KV head (for traces, policy-run and the golden
// tests). n = n_all - window candidates. Vectors a method does not compute stay empty.
struct HeadDiagnostics {
  // [window][n]: rkv/snapkv: logits, max over the query group (ALGORITHMS.md 2.1-2.2);
  // gkv: probabilities, max over the group after the softmax, window columns dropped.
  std::vector<float> attention;
  std::vector<float> attention_mean;    // [n]: rkv/snapkv importance before pooling; gkv local
  std::vector<float> shift_std;         // [n]: gkv shift: unbiased std over the window rows
  std::vector<float> local_shifted;     // [n]: gkv shift: local + gamma * std
  std::vector<float> local_normalized;  // [n]: gkv with a score cache: local / max(local)
  std::vector<float> old_score;         // [n]: gkv with state: previous global score, extended
  std::vector<float> global_score;      // [n]: gkv: after smoothing; h2o: accumulator
  std::vector<float> importance;        // [n]: after 1-D pooling
  std::vector<float> redundancy_full;   // [n_all]: ALGORITHMS.md 3 over all entries
  std::vector<float> redundancy_raw;    // [n]: its candidate entries
  std::vector<float> redundancy;        // [n]: as mixed into the score (gkv: normalised)
  std::vector<float> sentence_penalty;  // [n]: skipkv: penalty of each candidate's sentence
  std::vector<float> final_score;       // [n]: what the top-k selection ranks
  std::vector<std::int32_t> top_k;      // the selected candidates by descending score
};
struct Diagnostics {
  std::vector<HeadDiagnostics> heads;  // [kv_heads]
};

// ---- entry points -------------------------------------------------------------------------------

// Whether a layer holding n_all entries per head is compressed (ALGORITHMS.md 1: only when
// n_all > budget_for(seq_len); never for fullkv).
bool should_compress(int n_all, const CompressionParams& params, std::int64_t seq_len = 0);

// The single entry point: validates params and view, and when should_compress() plans one
// compression of the layer. Otherwise returns compressed = false and the identity selection.
// With a pool, KV heads are scored in parallel. Pure: reads the view, writes nothing else.
Selection compress_layer(const LayerView& view, const CompressionParams& params,
                         Diagnostics* diag = nullptr, ThreadPool* pool = nullptr);

// The scoring and selection pipeline without the trigger test: runs whenever
// n_all >= budget_for(seq_len) (R-KV's reference also runs at n_all == budget, where it keeps
// every entry; policy-run uses this to reproduce that case). Throws rkv::Error when n_all is
// smaller than the budget.
Selection score_and_select(const LayerView& view, const CompressionParams& params,
                           Diagnostics* diag = nullptr, ThreadPool* pool = nullptr);

// H2O (ALGORITHMS.md 4): call after EVERY decoding step (and for every prompt token at prefill if
// wanted) with that step's attention probabilities. probs: [q_heads][n_all] (one query per head,
// over the n_all cached entries, the new token's own entry included). For every KV head h and
// entry i: accumulators[h][i] += max over h's query group of probs[j][i]; an accumulator holding
// kNoState (a new entry) starts from 0. The `h2o` preset then keeps the top budget - window
// entries by accumulator plus the recent window, and carries the accumulators of kept entries.
void accumulate_h2o(const float* probs, int q_heads, int kv_heads, int n_all,
                    std::span<float* const> accumulators);

// SkipKV sentence redundancy (ALGORITHMS.md 5) over `count` sentence embeddings [count][dim],
// oldest first: penalty[i] = the largest cosine(v_i, v_j) over LATER sentences j > i with
// cosine > tau, else 0 (the later sentence of a pair is never penalised for it). A zero vector
// has cosine 0 with everything. O(count^2 dim): the engine updates the same penalties
// incrementally as sentences complete (engine/sentence_tracker.h); this is the definition.
std::vector<float> sentence_penalties(std::span<const float> embeddings, int count, int dim,
                                      float tau);
// Cosine similarity of two vectors, each normalised as x / (|x| + 1e-8) as in ALGORITHMS.md 3,
// accumulated in double.
float sentence_cosine(const float* x, const float* y, int dim);

// G-KV's prefill seed of the score cache (the reference uses it only with smoothing `sum` and
// decay 1): for every prompt entry, the causal attention probabilities of ALL prompt queries,
// max over the query group after the softmax, summed over the queries, not normalised.
// queries: [q_heads][n][head_dim]; keys: [kv_heads] -> [n][head_dim]; out: [kv_heads] -> [n].
void gkv_prefill_scores(const float* queries, std::span<const float* const> keys, int q_heads,
                        int kv_heads, int head_dim, int n, std::span<float* const> out);

}  // namespace rkv
