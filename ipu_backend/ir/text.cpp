#include "ipu_backend/ir/text.h"

#include <cctype>
#include <charconv>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ipu_backend/ir/op_defs.h"

namespace ipu {
namespace {

std::string floatStr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);  // shortest representation that round-trips
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string attrStr(const AttrValue& v) {
  struct V {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(i64 i) const { return std::to_string(i); }
    std::string operator()(double d) const { return floatStr(d); }
    std::string operator()(const std::string& s) const { return "\"" + s + "\""; }
    std::string operator()(const std::vector<i64>& l) const {
      return fmt::format("[{}]", fmt::join(l, ","));
    }
  };
  return std::visit(V{}, v);
}

std::string typeStr(const Tensor& t) {
  return fmt::format("{}{}", dtypeName(t.dtype), shapeStr(t.shape));
}

// ---- lexer / recursive-descent parser ------------------------------------------------------

bool isNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' ||
         c == '-';
}

class Parser {
 public:
  Parser(std::string_view text, std::string source) : s_(text), source_(std::move(source)) {}

  Graph parse() {
    skipSpace();
    expectWord("graph");
    std::string name = word("a graph name");
    Graph g(name);
    expectChar('{');
    while (true) {
      skipSpace();
      if (peek() == '}') {
        ++pos_;
        ++col_;
        break;
      }
      if (atEnd()) error("unexpected end of input: missing '}' closing the graph");
      statement(g);
    }
    skipSpace();
    if (!atEnd()) error("unexpected text after the closing '}'");
    return g;
  }

 private:
  [[noreturn]] void error(const std::string& msg) const { errorAt(msg, line_, col_); }
  [[noreturn]] void errorAt(const std::string& msg, int line, int col) const {
    throw ParseError(fmt::format("{}:{}:{}: {}", source_, line, col, msg), line, col);
  }

  bool atEnd() const { return pos_ >= s_.size(); }
  char peek() const { return atEnd() ? '\0' : s_[pos_]; }
  void advance() {
    if (s_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }
  void skipSpace() {
    while (!atEnd()) {
      if (std::isspace(static_cast<unsigned char>(peek()))) {
        advance();
      } else if (peek() == '#') {  // comment to end of line
        while (!atEnd() && peek() != '\n') advance();
      } else {
        break;
      }
    }
  }
  std::string describeNext() const {
    if (atEnd()) return "end of input";
    size_t e = pos_;
    while (e < s_.size() && !std::isspace(static_cast<unsigned char>(s_[e])) && e - pos_ < 12)
      ++e;
    return fmt::format("'{}'", s_.substr(pos_, e - pos_));
  }
  void expectChar(char c) {
    skipSpace();
    if (peek() != c) error(fmt::format("expected '{}', found {}", c, describeNext()));
    advance();
  }
  bool acceptChar(char c) {
    skipSpace();
    if (peek() != c) return false;
    advance();
    return true;
  }
  std::string word(const char* what) {
    skipSpace();
    size_t b = pos_;
    while (!atEnd() && isNameChar(peek())) advance();
    if (b == pos_) error(fmt::format("expected {}, found {}", what, describeNext()));
    return std::string(s_.substr(b, pos_ - b));
  }
  void expectWord(const char* w) {
    skipSpace();
    int l = line_, c = col_;
    std::string got = word(fmt::format("'{}'", w).c_str());
    if (got != w) errorAt(fmt::format("expected '{}', found '{}'", w, got), l, c);
  }
  std::string tensorRef() {
    skipSpace();
    if (peek() != '%') error(fmt::format("expected a tensor name like %x, found {}", describeNext()));
    advance();
    return word("a tensor name after '%'");
  }
  i64 integer() {
    skipSpace();
    size_t b = pos_;
    if (peek() == '-') advance();
    while (!atEnd() && std::isdigit(static_cast<unsigned char>(peek()))) advance();
    i64 v = 0;
    auto r = std::from_chars(s_.data() + b, s_.data() + pos_, v);
    if (r.ec != std::errc() || r.ptr != s_.data() + pos_)
      error(fmt::format("expected an integer, found {}", describeNext()));
    return v;
  }
  TensorType type() {
    skipSpace();
    int l = line_, c = col_;
    std::string dt = word("a dtype (f32, f16, bf16, i32)");
    auto d = parseDType(dt);
    if (!d) errorAt(fmt::format("unknown dtype '{}' (expected f32, f16, bf16 or i32)", dt), l, c);
    expectChar('[');
    Shape shape;
    if (!acceptChar(']')) {
      do {
        shape.push_back(integer());
      } while (acceptChar(','));
      expectChar(']');
    }
    return {shape, *d};
  }
  AttrValue attrValue() {
    skipSpace();
    char c = peek();
    if (c == '"') {
      advance();
      size_t b = pos_;
      while (!atEnd() && peek() != '"' && peek() != '\n') advance();
      if (peek() != '"') error("unterminated string");
      std::string v(s_.substr(b, pos_ - b));
      advance();
      return v;
    }
    if (c == '[') {
      advance();
      std::vector<i64> l;
      if (!acceptChar(']')) {
        do {
          l.push_back(integer());
        } while (acceptChar(','));
        expectChar(']');
      }
      return l;
    }
    size_t b = pos_;
    while (!atEnd() && (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '.' ||
                        peek() == '-' || peek() == '+'))
      advance();
    std::string tok(s_.substr(b, pos_ - b));
    if (tok.empty()) error(fmt::format("expected an attribute value, found {}", describeNext()));
    if (tok == "true") return true;
    if (tok == "false") return false;
    if (tok == "nan") return std::nan("");
    if (tok == "inf") return HUGE_VAL;
    if (tok == "-inf") return -HUGE_VAL;
    bool isFloatTok = tok.find_first_of(".eE") != std::string::npos;
    if (isFloatTok) {
      double d = 0;
      auto r = std::from_chars(tok.data(), tok.data() + tok.size(), d);
      if (r.ec == std::errc() && r.ptr == tok.data() + tok.size()) return d;
    } else {
      i64 v = 0;
      auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
      if (r.ec == std::errc() && r.ptr == tok.data() + tok.size()) return v;
    }
    errorAt(fmt::format("invalid attribute value '{}'", tok), line_, col_ - static_cast<int>(tok.size()));
  }
  int lookup(const Graph& g, const std::string& name, int l, int c) const {
    int id = g.find(name);
    if (id < 0) errorAt(fmt::format("unknown tensor '%{}' (not declared above)", name), l, c);
    return id;
  }

  void statement(Graph& g) {
    int l = line_, c = col_;
    if (peek() != '%') {
      std::string kw = word("a statement");
      if (kw == "input" || kw == "variable") {
        std::string name = tensorRef();
        expectChar(':');
        TensorType t = type();
        try {
          if (kw == "input")
            g.addInput(name, t.shape, t.dtype);
          else
            g.addVariable(name, t.shape, t.dtype);
        } catch (const GraphError& e) {
          errorAt(e.what(), l, c);
        }
        return;
      }
      if (kw == "output") {
        int tl = line_, tc = col_;
        std::string name = tensorRef();
        g.markOutput(lookup(g, name, tl, tc));
        return;
      }
      if (findOpDef(kw)) {
        opCall(g, kw, {}, l, c);
        return;
      }
      errorAt(fmt::format("unknown statement or op '{}'", kw), l, c);
    }
    std::vector<std::pair<std::string, TensorType>> outs;
    do {
      std::string name = tensorRef();
      expectChar(':');
      outs.emplace_back(name, type());
    } while (acceptChar(','));
    expectChar('=');
    int ol = line_, oc = col_;
    skipSpace();
    ol = line_;
    oc = col_;
    std::string opname = word("an op name");
    opCall(g, opname, outs, ol, oc);
  }

  void opCall(Graph& g, const std::string& opname,
              const std::vector<std::pair<std::string, TensorType>>& outs, int l, int c) {
    const OpDef* def = findOpDef(opname);
    if (!def) errorAt(fmt::format("unknown op '{}'", opname), l, c);
    expectChar('(');
    std::vector<int> inputs;
    if (!acceptChar(')')) {
      do {
        skipSpace();
        int tl = line_, tc = col_;
        inputs.push_back(lookup(g, tensorRef(), tl, tc));
      } while (acceptChar(','));
      expectChar(')');
    }
    Attrs attrs;
    if (acceptChar('{')) {
      if (!acceptChar('}')) {
        do {
          std::string key = word("an attribute name");
          expectChar('=');
          attrs.set(key, attrValue());
        } while (acceptChar(','));
        expectChar('}');
      }
    }
    std::vector<std::string> names;
    for (const auto& o : outs) names.push_back(o.first);
    int opId = -1;
    try {
      opId = g.addOp(def->kind, inputs, attrs, names);
    } catch (const GraphError& e) {
      errorAt(e.what(), l, c);
    }
    const Op& op = g.op(opId);
    for (size_t i = 0; i < outs.size(); ++i) {
      const Tensor& t = g.tensor(op.outputs[i]);
      if (t.shape != outs[i].second.shape || t.dtype != outs[i].second.dtype)
        errorAt(fmt::format("declared type of '%{}' is {}{}, but {} produces {}", t.name,
                            dtypeName(outs[i].second.dtype), shapeStr(outs[i].second.shape),
                            opname, typeStr(t)),
                l, c);
    }
  }

  std::string_view s_;
  std::string source_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

}  // namespace

std::string printGraph(const Graph& g) {
  std::string out = fmt::format("graph {} {{\n", g.name());
  for (const Tensor& t : g.tensors())
    if (t.kind != TensorKind::Activation)
      out += fmt::format("  {} %{}: {}\n", tensorKindName(t.kind), t.name, typeStr(t));
  for (const Op& op : g.ops()) {
    out += "  ";
    for (size_t i = 0; i < op.outputs.size(); ++i) {
      const Tensor& t = g.tensor(op.outputs[i]);
      out += fmt::format("{}%{}: {}", i ? ", " : "", t.name, typeStr(t));
    }
    if (!op.outputs.empty()) out += " = ";
    out += opName(op.kind);
    out += "(";
    for (size_t i = 0; i < op.inputs.size(); ++i)
      out += fmt::format("{}%{}", i ? ", " : "", g.tensor(op.inputs[i]).name);
    out += ")";
    if (!op.attrs.all().empty()) {
      out += " {";
      bool first = true;
      for (const auto& [k, v] : op.attrs.all()) {
        out += fmt::format("{}{}={}", first ? "" : ", ", k, attrStr(v));
        first = false;
      }
      out += "}";
    }
    out += "\n";
  }
  for (int o : g.outputs()) out += fmt::format("  output %{}\n", g.tensor(o).name);
  out += "}\n";
  return out;
}

Graph parseGraph(std::string_view text, const std::string& source) {
  return Parser(text, source).parse();
}

}  // namespace ipu
