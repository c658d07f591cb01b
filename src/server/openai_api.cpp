#include "server/openai_api.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/utf8.h"

namespace rkv::server {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

// The kv settings that are switches: a request gives them as JSON booleans.
bool is_boolean_setting(const std::string& name) {
  return name == "redundancy" || name == "pooling" || name == "disable_norm" ||
         name == "think_only";
}

const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

bool get_bool(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) bad(name, std::string("'") + name + "' must be a boolean");
  return v->get<bool>();
}

double get_number(const json& body, const char* name, double fallback, double lo, double hi) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_number()) bad(name, std::string("'") + name + "' must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    bad(name, std::string("'") + name + "' must be between " + json(lo).dump() + " and " +
                  json(hi).dump() + ", got " + dump_json(*v));
  return x;
}

long long get_int(const json& body, const char* name, long long fallback, long long lo,
                  long long hi) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer())
    bad(name, std::string("'") + name + "' must be an integer, got " + dump_json(*v));
  if (v->is_number_unsigned() && v->get<unsigned long long>() > static_cast<unsigned long long>(hi))
    bad(name, std::string("'") + name + "' must be at most " + std::to_string(hi));
  const long long x = v->get<long long>();
  if (x < lo || x > hi)
    bad(name, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " +
                  std::to_string(hi) + ", got " + std::to_string(x));
  return x;
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts.
std::string message_content(const json& content, std::size_t index) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return {};
  if (!content.is_array()) bad(param, "'" + param + "' must be a string or an array of parts");
  std::string out;
  for (const json& part : content) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
        !part["text"].is_string())
      bad(param, "'" + param +
                     "': only text parts ({\"type\": \"text\", \"text\": ...}) are "
                     "supported");
    out += part["text"].get<std::string>();
  }
  return out;
}

// The path of the first string or key in `j` that holds `mark` ("messages[0].content"); empty
// when none does.
std::string find_marked(const json& j, const std::string& mark, const std::string& path) {
  if (j.is_string())
    return j.get_ref<const std::string&>().find(mark) != std::string::npos
               ? (path.empty() ? std::string("(the body)") : path)
               : std::string();
  if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) {
      std::string p = find_marked(j[i], mark, path + "[" + std::to_string(i) + "]");
      if (!p.empty()) return p;
    }
  } else if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      const std::string p = path.empty() ? key : path + "." + key;
      if (key.find(mark) != std::string::npos) return p + " (a key)";
      std::string inner = find_marked(value, mark, p);
      if (!inner.empty()) return inner;
    }
  }
  return {};
}

// One message of a chat request: role and content, and the fields a template reads beyond them
// (an assistant's tool_calls and reasoning_content, a tool's tool_call_id and name), taken from
// `ordered` (the same message with its keys in the order sent).
ChatMessage chat_message(const json& m, const nlohmann::ordered_json& ordered, std::size_t i) {
  const std::string param = "messages[" + std::to_string(i) + "]";
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
    bad(param, "'" + param + "' must be an object with a string 'role'");
  std::string role = m["role"].get<std::string>();
  if (role == "developer") role = "system";
  if (role != "system" && role != "user" && role != "assistant" && role != "tool")
    bad(param + ".role", "'" + param +
                             ".role' must be system, developer, user, assistant or tool, got '" +
                             role + "'");
  ChatMessage out{role, message_content(m.value("content", json()), i)};
  // A string field of the message, given to the template as `key` (out.fields, null until then,
  // becomes an object at its first key).
  auto string_field = [&](const char* name, const char* key) {
    const json* v = field(m, name);
    if (v == nullptr) return;
    if (!v->is_string()) bad(param + "." + name, "'" + param + "." + name + "' must be a string");
    out.fields[key] = v->get<std::string>();
  };
  if (role == "tool") {
    string_field("tool_call_id", "tool_call_id");
    string_field("name", "name");
  }
  if (role != "assistant") return out;
  // The chain of thought of an earlier turn, under either name (templates read
  // reasoning_content).
  string_field("reasoning_content", "reasoning_content");
  string_field("reasoning", "reasoning_content");
  const json* calls = field(m, "tool_calls");
  if (calls == nullptr) return out;
  if (!calls->is_array()) bad(param + ".tool_calls", "'" + param + ".tool_calls' must be an array");
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (std::size_t k = 0; k < calls->size(); ++k) {
    const std::string cp = param + ".tool_calls[" + std::to_string(k) + "]";
    const json& c = (*calls)[k];
    const json* fn = c.is_object() ? field(c, "function") : nullptr;
    if (fn == nullptr || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
      bad(cp, "'" + cp +
                  "' must be {\"id\": ..., \"type\": \"function\", \"function\": {\"name\": ..., "
                  "\"arguments\": ...}}");
    if (const json* id = field(c, "id"); id != nullptr && !id->is_string())
      bad(cp + ".id", "'" + cp + ".id' must be a string");
    nlohmann::ordered_json call = ordered["tool_calls"][k];
    // OpenAI's clients send the arguments as JSON text; templates read an object (as vLLM
    // passes them): text that is a JSON object is given as that object.
    auto& arguments = call["function"]["arguments"];
    if (arguments.is_string()) {
      auto parsed = nlohmann::ordered_json::parse(arguments.get<std::string>(), nullptr, false);
      if (!parsed.is_discarded() && parsed.is_object()) arguments = std::move(parsed);
    } else if (!arguments.is_null() && !arguments.is_object()) {
      bad(cp + ".function.arguments",
          "'" + cp + ".function.arguments' must be a JSON string or object");
    }
    if (arguments.is_null()) arguments = nlohmann::ordered_json::object();
    list.push_back(std::move(call));
  }
  out.fields["tool_calls"] = std::move(list);
  return out;
}

// tools, tool_choice and parallel_tool_calls.
void parse_tools(const json& j, const nlohmann::ordered_json& ordered, ParsedRequest& out) {
  const json* tools = field(j, "tools");
  std::vector<std::string> names;
  if (tools != nullptr) {
    if (!tools->is_array())
      bad("tools", "'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
    if (tools->size() > 256) bad("tools", "'tools' takes at most 256 functions");
    for (std::size_t i = 0; i < tools->size(); ++i) {
      const std::string param = "tools[" + std::to_string(i) + "]";
      const json& t = (*tools)[i];
      if (!t.is_object() || t.value("type", json()) != "function" || !t.contains("function") ||
          !t["function"].is_object())
        bad(param, "'" + param +
                       "' must be {\"type\": \"function\", \"function\": {\"name\": ..., "
                       "\"parameters\": {...}}}");
      const json& fn = t["function"];
      if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty())
        bad(param + ".function.name", "'" + param + ".function.name' must be a non-empty string");
      if (fn.contains("parameters") && !fn["parameters"].is_object() && !fn["parameters"].is_null())
        bad(param + ".function.parameters",
            "'" + param + ".function.parameters' must be a JSON schema object");
      const std::string name = fn["name"].get<std::string>();
      if (std::find(names.begin(), names.end(), name) != names.end())
        bad(param + ".function.name", "two tools are named '" + name + "'");
      names.push_back(name);
    }
    if (!tools->empty()) out.request.tools = ordered["tools"];
  }
  out.parallel_tool_calls = get_bool(j, "parallel_tool_calls", true);
  const json* choice = field(j, "tool_choice");
  out.tool_choice = names.empty() ? ToolChoice::none : ToolChoice::automatic;
  if (choice == nullptr) return;
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") {
      out.tool_choice = ToolChoice::none;
      return;
    }
    if (c != "auto" && c != "required")
      bad("tool_choice",
          "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": "
          "{\"name\": ...}}");
    if (names.empty()) bad("tool_choice", "'tool_choice' " + c + " needs 'tools'");
    out.tool_choice = c == "auto" ? ToolChoice::automatic : ToolChoice::required;
    return;
  }
  const json* fn = choice->is_object() ? field(*choice, "function") : nullptr;
  if (fn == nullptr || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
    bad("tool_choice",
        "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": "
        "{\"name\": ...}}");
  out.tool_choice_name = (*fn)["name"].get<std::string>();
  if (std::find(names.begin(), names.end(), out.tool_choice_name) == names.end())
    bad("tool_choice", "'tool_choice' names the function '" + out.tool_choice_name +
                           "', which is not among the request's tools");
  out.tool_choice = ToolChoice::function;
}

}  // namespace

json parse_request_json(const std::string& body) {
  std::size_t bad_at = std::string::npos;
  for (std::size_t i = 0; i < body.size();) {
    const Utf8Step step = utf8_step(body, i);
    if (!step.valid) {
      bad_at = i;
      break;
    }
    i += step.length;
  }
  if (bad_at == std::string::npos) {
    json j;
    try {
      j = json::parse(body);
    } catch (const json::exception& e) {
      throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what());
    }
    if (!j.is_object()) bad("", "the request body must be a JSON object");
    return j;
  }
  // Invalid bytes: find the field that holds them by parsing a copy in which each invalid
  // subpart is a noncharacter the body does not hold.
  char hex[8];
  std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned char>(body[bad_at]));
  const std::string where =
      std::string(" (byte ") + hex + " at offset " + std::to_string(bad_at) + " of the body)";
  std::string mark;
  for (char32_t cp = 0xFDD0; cp <= 0xFDEF && mark.empty(); ++cp) {
    std::string m;
    append_utf8(m, cp);
    if (body.find(m) == std::string::npos) mark = m;
  }
  std::string field;
  if (!mark.empty()) {
    std::string copy;
    copy.reserve(body.size() + 16);
    for (std::size_t i = 0; i < body.size();) {
      const Utf8Step step = utf8_step(body, i);
      if (step.valid)
        copy.append(body, i, step.length);
      else
        copy += mark;
      i += std::max<std::size_t>(step.length, 1);
    }
    const json j = json::parse(copy, nullptr, false);
    if (!j.is_discarded()) field = find_marked(j, mark, "");
  }
  if (field.empty()) bad("", "the request body is not valid UTF-8" + where);
  bad(field, "'" + field + "' is not valid UTF-8" + where);
}

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json error_body(const std::string& message, const std::string& type, const std::string& param,
                const std::string& code) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

CompressionParams parse_kv_object(const json& kv, const CompressionParams& defaults) {
  if (!kv.is_object()) bad("kv", "'kv' must be an object such as {\"method\": \"rkv\", ...}");
  CompressionParams p = defaults;
  try {
    if (const auto it = kv.find("method"); it != kv.end()) {
      if (!it->is_string()) bad("kv.method", "'kv.method' must be a string");
      const Method m = parse_method(it->get<std::string>());
      // A different method starts from that method's preset, as --kv-method does.
      if (m != defaults.method) p = CompressionParams::defaults(m);
    }
    for (const auto& [name, value] : kv.items()) {
      if (name == "method" || name == "dtype") continue;  // dtype: parse_kv_dtype_field
      const bool known =
          std::any_of(compression_param_table().begin(), compression_param_table().end(),
                      // An init-capture: clang before 16 cannot capture a structured binding.
                      [&key = name](const ParamInfo& i) { return i.name == key; });
      if (!known) {
        std::string names;
        for (const ParamInfo& i : compression_param_table())
          names += (names.empty() ? "" : ", ") + std::string(i.name);
        bad("kv." + name, "unknown KV setting 'kv." + name + "' (known: " + names + ")");
      }
      std::string text;
      if (is_boolean_setting(name) && !value.is_boolean())
        bad("kv." + name,
            "'kv." + name + "' must be a boolean (true or false), got " + dump_json(value));
      if (value.is_string()) {
        text = value.get<std::string>();
      } else if (value.is_boolean()) {
        text = value.get<bool>() ? "on" : "off";
      } else if (value.is_number()) {
        text = dump_json(value);
      } else if (value.is_null()) {
        text = "none";
      } else if (value.is_array()) {
        std::vector<std::string> items;
        for (const json& item : value) {
          if (!item.is_string()) bad("kv." + name, "'kv." + name + "' must be a list of strings");
          items.push_back(item.get<std::string>());
        }
        text = format_text_list(items);
      } else {
        bad("kv." + name, "'kv." + name + "' has a value of the wrong type: " + dump_json(value));
      }
      p.set(name, text);
    }
    // What the settings mean together (budget against window, ...) is checked by
    // Engine::prepare, which names "kv" as the field.
  } catch (const Error& e) {
    throw ApiError(400, std::string("kv: ") + e.what(), "kv");
  }
  return p;
}

std::optional<KvDtype> parse_kv_dtype_field(const json& kv) {
  if (!kv.is_object()) return std::nullopt;
  const auto it = kv.find("dtype");
  if (it == kv.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) bad("kv.dtype", "'kv.dtype' must be a string: f32, bf16, f16 or q8_0");
  try {
    return parse_kv_dtype(it->get<std::string>());
  } catch (const Error& e) {
    throw ApiError(400, std::string("kv: ") + e.what(), "kv.dtype");
  }
}

ParsedRequest parse_completion_request(const std::string& body, bool chat,
                                       const RequestDefaults& defaults, std::uint64_t random_seed) {
  const json j = parse_request_json(body);

  // For chat, the same body with its keys in the order sent: what the template sees (tojson of a
  // tool schema prints its keys in that order, as transformers does with the client's dicts).
  const auto ordered = chat ? nlohmann::ordered_json::parse(body) : nlohmann::ordered_json();

  ParsedRequest out;
  out.chat = chat;
  Request& r = out.request;
  if (const json* m = field(j, "model")) {
    if (!m->is_string()) bad("model", "'model' must be a string");
    out.model = m->get<std::string>();
  }
  if (chat) {
    const json* messages = field(j, "messages");
    if (messages == nullptr) bad("messages", "'messages' is required");
    if (!messages->is_array() || messages->empty())
      bad("messages", "'messages' must be a non-empty array");
    for (std::size_t i = 0; i < messages->size(); ++i)
      r.messages.push_back(chat_message((*messages)[i], ordered["messages"][i], i));
    parse_tools(j, ordered, out);
  } else {
    const json* prompt = field(j, "prompt");
    if (prompt == nullptr) bad("prompt", "'prompt' is required");
    if (prompt->is_string()) {
      r.text = prompt->get<std::string>();
      if (r.text.empty()) bad("prompt", "'prompt' is empty");
    } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number_integer()) {
      for (const json& id : *prompt) {
        if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() > 1 << 30)
          bad("prompt", "'prompt' as token ids must be an array of non-negative integers");
        r.prompt_ids.push_back(id.get<int>());
      }
    } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
      r.text = (*prompt)[0].get<std::string>();
      if (r.text.empty()) bad("prompt", "'prompt' is empty");
    } else {
      bad("prompt",
          "'prompt' must be a string, an array of one string, or an array of token "
          "ids (one prompt per request)");
    }
  }

  const json* max_completion = field(j, "max_completion_tokens");
  const char* max_name = max_completion != nullptr ? "max_completion_tokens" : "max_tokens";
  out.max_tokens_given = field(j, max_name) != nullptr;
  r.max_new_tokens = static_cast<int>(get_int(j, max_name, defaults.max_tokens, 1, 1 << 30));
  r.strict_length = out.max_tokens_given;
  r.sampling = defaults.sampling;
  r.sampling.temperature =
      static_cast<float>(get_number(j, "temperature", r.sampling.temperature, 0.0, 2.0));
  r.sampling.top_p = static_cast<float>(get_number(j, "top_p", r.sampling.top_p, 0.0, 1.0));
  if (r.sampling.top_p <= 0.0f) bad("top_p", "'top_p' must be greater than 0");
  const long long top_k = get_int(j, "top_k", r.sampling.top_k, -1, 1 << 30);
  r.sampling.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
  r.sampling.min_p = static_cast<float>(get_number(j, "min_p", r.sampling.min_p, 0.0, 1.0));
  if (const json* seed = field(j, "seed")) {
    if (!seed->is_number_integer()) bad("seed", "'seed' must be an integer");
    r.sampling.seed = seed->is_number_unsigned()
                          ? seed->get<std::uint64_t>()
                          : static_cast<std::uint64_t>(seed->get<long long>());
  } else if (!defaults.seeded) {
    r.sampling.seed = random_seed;
  }
  out.n = static_cast<int>(get_int(j, "n", 1, 1, defaults.max_n));
  if (const json* stop = field(j, "stop"); stop == nullptr) {
    r.stop = defaults.stop;
  } else {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const json& s : *stop) {
        if (!s.is_string()) bad("stop", "'stop' must be a string or an array of strings");
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or an array of strings");
    }
    if (r.stop.size() > 16) bad("stop", "'stop' takes at most 16 strings");
    for (const auto& s : r.stop)
      if (s.empty()) bad("stop", "'stop' strings must not be empty");
  }
  out.stream = get_bool(j, "stream", false);
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!out.stream)
      bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    out.include_usage = get_bool(*so, "include_usage", false);
  }
  r.ignore_eos = get_bool(j, "ignore_eos", false);
  // The thinking budget: thinking_budget, or vLLM's thinking_token_budget (not both).
  r.thinking_budget = defaults.thinking_budget;
  r.thinking_budget_message = defaults.thinking_budget_message;
  for (const char* name : {"thinking_budget", "thinking_token_budget"}) {
    if (const json* b = field(j, name); b != nullptr && !b->is_null()) {
      if (field(j, "thinking_budget") != nullptr && field(j, "thinking_token_budget") != nullptr)
        bad(name, "give 'thinking_budget' or 'thinking_token_budget', not both");
      r.thinking_budget = static_cast<int>(get_int(j, name, -1, 0, 1 << 30));
    }
  }
  if (const json* m = field(j, "thinking_budget_message"); m != nullptr && !m->is_null()) {
    if (!m->is_string())
      bad("thinking_budget_message", "'thinking_budget_message' must be a string");
    r.thinking_budget_message = m->get<std::string>();
  }
  // Log-probabilities: chat takes `logprobs` (true/false) and `top_logprobs` (0-20); completions
  // the legacy `logprobs` (the number of alternatives, 0-5).
  // false (and, for chat, 0) ask for none, as clients that send a neutral value mean.
  const json* lp_field = field(j, "logprobs");
  const bool lp_none = lp_field == nullptr || lp_field->is_null() || *lp_field == json(false) ||
                       (chat && *lp_field == json(0));
  if (const json* lp = lp_field; !lp_none) {
    if (chat) {
      if (!lp->is_boolean()) bad("logprobs", "'logprobs' must be true or false");
      const json* top = field(j, "top_logprobs");
      if (top != nullptr && !top->is_null() && !lp->get<bool>())
        bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      if (lp->get<bool>()) r.logprobs = static_cast<int>(get_int(j, "top_logprobs", 0, 0, 20));
    } else {
      r.logprobs = static_cast<int>(get_int(j, "logprobs", 0, 0, 5));
    }
  } else if (const json* top = field(j, "top_logprobs");
             top != nullptr && !top->is_null() && *top != json(0)) {
    bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  }

  r.sampling.presence_penalty =
      static_cast<float>(get_number(j, "presence_penalty", r.sampling.presence_penalty, -2.0, 2.0));
  r.sampling.frequency_penalty = static_cast<float>(
      get_number(j, "frequency_penalty", r.sampling.frequency_penalty, -2.0, 2.0));
  r.sampling.repetition_penalty = static_cast<float>(
      get_number(j, "repetition_penalty", r.sampling.repetition_penalty, 0.0, 10.0));
  if (r.sampling.repetition_penalty <= 0.0f)
    bad("repetition_penalty", "'repetition_penalty' must be greater than 0 (1 is off)");
  if (const json* lb = field(j, "logit_bias"); lb != nullptr && !lb->is_null()) {
    // OpenAI's form: {"token id": bias, ...}, the ids as decimal strings.
    if (!lb->is_object()) bad("logit_bias", "'logit_bias' must be an object of token id -> bias");
    if (lb->size() > 4096) bad("logit_bias", "'logit_bias' takes at most 4096 tokens");
    r.sampling.logit_bias.clear();
    for (const auto& [key, value] : lb->items()) {
      const std::string param = "logit_bias." + key;
      int id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size() || id < 0)
        bad(param,
            "'logit_bias' keys must be token ids (non-negative integers), got '" + key + "'");
      if (!value.is_number() || !(value.get<double>() >= -100.0 && value.get<double>() <= 100.0))
        bad(param, "'" + param + "' must be a number in [-100, 100]");
      r.sampling.logit_bias.emplace_back(id, static_cast<float>(value.get<double>()));
    }
  }
  if (!chat) {
    if (get_bool(j, "echo", false)) bad("echo", "'echo' is not supported by this server");
    if (const json* suffix = field(j, "suffix");
        suffix != nullptr && !(suffix->is_string() && suffix->get<std::string>().empty()))
      bad("suffix", "'suffix' is not supported by this server");
    if (get_int(j, "best_of", 1, 1, 1 << 30) != 1)
      bad("best_of", "'best_of' other than 1 is not supported by this server");
  }
  if (!chat && field(j, "tools") != nullptr)
    bad("tools", "'tools' applies to /v1/chat/completions only");
  if (const json* rf = field(j, "response_format")) {
    if (!rf->is_object() || rf->value("type", std::string()) != "text")
      bad("response_format", "only {\"type\": \"text\"} responses are supported");
  }
  out.reasoning_inline = defaults.reasoning_inline;
  if (const json* rf = field(j, "reasoning_format")) {
    if (!rf->is_string()) bad("reasoning_format", "'reasoning_format' must be a string");
    const std::string v = rf->get<std::string>();
    if (v == "none") {
      out.reasoning_inline = true;
    } else if (v == "parsed" || v == "deepseek") {
      out.reasoning_inline = false;
    } else {
      bad("reasoning_format",
          "'reasoning_format' must be 'parsed' (reasoning_content) or "
          "'none' (the reasoning inline in the content)");
    }
  }
  if (const json* kwargs = field(j, "chat_template_kwargs")) {
    // Variables for the model's chat template (enable_thinking, reasoning_effort, ...), bound
    // after bos_token and eos_token as apply_chat_template binds its keyword arguments.
    if (!chat)
      bad("chat_template_kwargs", "'chat_template_kwargs' applies to /v1/chat/completions only");
    if (!kwargs->is_object())
      bad("chat_template_kwargs",
          "'chat_template_kwargs' must be an object such as {\"enable_thinking\": false}");
    r.chat_template_kwargs = ordered["chat_template_kwargs"];
  }
  if (const json* effort = field(j, "reasoning_effort")) {
    // OpenAI's top-level field, given to the template as gpt-oss's template reads it (a
    // reasoning_effort in chat_template_kwargs wins).
    if (!chat) bad("reasoning_effort", "'reasoning_effort' applies to /v1/chat/completions only");
    if (!effort->is_string()) bad("reasoning_effort", "'reasoning_effort' must be a string");
    if (r.chat_template_kwargs.is_null()) r.chat_template_kwargs = nlohmann::ordered_json::object();
    if (!r.chat_template_kwargs.contains("reasoning_effort"))
      r.chat_template_kwargs["reasoning_effort"] = effort->get<std::string>();
  }
  if (chat && defaults.chat_template_kwargs.is_object()) {
    // The server's defaults, under what the request gives.
    nlohmann::ordered_json merged = defaults.chat_template_kwargs;
    if (r.chat_template_kwargs.is_object())
      for (const auto& [key, value] : r.chat_template_kwargs.items()) merged[key] = value;
    r.chat_template_kwargs = std::move(merged);
  }
  r.compression = defaults.compression;
  if (const json* kv = field(j, "kv")) {
    r.compression = parse_kv_object(*kv, defaults.compression);
    r.kv_dtype = parse_kv_dtype_field(*kv);
  }
  r.steering = defaults.steering;
  return out;
}

json logprobs_body(std::span<const TokenLogprob> logprobs, const Tokenizer& tokenizer, bool chat,
                   std::size_t text_offset) {
  const auto text_of = [&](int id) { return tokenizer.decode({id}); };
  const auto bytes_of = [&](int id) {
    json bytes = json::array();
    for (unsigned char b : tokenizer.token_text(id)) bytes.push_back(static_cast<int>(b));
    return bytes;
  };
  if (chat) {
    json content = json::array();
    for (const TokenLogprob& t : logprobs) {
      json top = json::array();
      for (const auto& [id, lp] : t.top)
        top.push_back({{"token", text_of(id)}, {"logprob", lp}, {"bytes", bytes_of(id)}});
      content.push_back({{"token", text_of(t.token)},
                         {"logprob", t.logprob},
                         {"bytes", bytes_of(t.token)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  std::size_t offset = text_offset;
  for (const TokenLogprob& t : logprobs) {
    const std::string text = text_of(t.token);
    tokens.push_back(text);
    token_logprobs.push_back(t.logprob);
    json alternatives = json::object();
    for (const auto& [id, lp] : t.top) alternatives[text_of(id)] = lp;
    top.push_back(alternatives);
    offsets.push_back(offset);
    offset += text.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json kv_report(const std::vector<Completion>& choices) {
  if (choices.empty()) return json::object();
  const CompressionParams& p = choices.front().compression;
  json kv = {{"method", method_name(p.method)}, {"dtype", kv_dtype_name(choices.front().kv_dtype)}};
  if (p.info().compresses) {
    kv["budget"] = p.budget;
    kv["buffer"] = p.buffer;
    kv["window"] = p.window;
  }
  std::int64_t compressions = 0;
  std::size_t bytes = 0, used = 0;
  int capacity = 0, max_entries = 0;
  for (const auto& c : choices) {
    compressions += c.compressions;
    bytes += c.kv_bytes;
    used += c.kv_bytes_used;
    capacity = std::max(capacity, c.cache_capacity);
    max_entries = std::max(max_entries, c.max_cache_entries);
  }
  kv["compressions"] = compressions;
  kv["kv_bytes"] = bytes;
  kv["kv_bytes_used"] = used;
  kv["cache_capacity"] = capacity;
  kv["max_cache_entries"] = max_entries;
  return kv;
}

json usage_body(const std::vector<Completion>& choices) {
  int completion = 0, reasoning = 0;
  for (const auto& c : choices) {
    completion += static_cast<int>(c.tokens.size());
    reasoning += c.reasoning_tokens;
  }
  const int prompt = choices.empty() ? 0 : choices.front().prompt_tokens;
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"completion_tokens_details", {{"reasoning_tokens", reasoning}}}};
}

}  // namespace rkv::server
