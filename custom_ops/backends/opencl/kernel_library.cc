#include "backends/opencl/kernel_library.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <utility>

namespace sdgpu::ocl {
namespace {

constexpr int kMaxExpansionDepth = 64;

bool IsIdStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsIdChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

struct Token {
  enum Kind { kIdent, kNumber, kString, kPunct } kind = kPunct;
  std::string text;
  bool space_before = false;
};
using Tokens = std::vector<Token>;

// Tokens of preprocessed-line text (comments already removed or removed here).
Tokens Tokenize(const std::string& s) {
  Tokens out;
  bool space = false;
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = true;
      ++i;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      const size_t e = s.find("*/", i + 2);
      i = e == std::string::npos ? s.size() : e + 2;
      space = true;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      const size_t e = s.find('\n', i);
      i = e == std::string::npos ? s.size() : e;
      space = true;
      continue;
    }
    Token t;
    t.space_before = space;
    space = false;
    if (IsIdStart(c)) {
      size_t j = i;
      while (j < s.size() && IsIdChar(s[j])) ++j;
      t.kind = Token::kIdent;
      t.text = s.substr(i, j - i);
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c)) ||
               (c == '.' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      size_t j = i + 1;
      while (j < s.size() && (IsIdChar(s[j]) || s[j] == '.' ||
                              ((s[j] == '+' || s[j] == '-') && (s[j - 1] == 'e' || s[j - 1] == 'E' ||
                                                                 s[j - 1] == 'p' || s[j - 1] == 'P')))) {
        ++j;
      }
      t.kind = Token::kNumber;
      t.text = s.substr(i, j - i);
      i = j;
    } else if (c == '"' || c == '\'') {
      size_t j = i + 1;
      while (j < s.size() && s[j] != c) j += s[j] == '\\' ? 2 : 1;
      j = std::min(j + 1, s.size());
      t.kind = Token::kString;
      t.text = s.substr(i, j - i);
      i = j;
    } else {
      static const char* const kMulti[] = {"##", "&&", "||", "==", "!=", "<=", ">=", "<<", ">>", "->", "++", "--"};
      t.kind = Token::kPunct;
      t.text = std::string(1, c);
      for (const char* m : kMulti) {
        if (s.compare(i, 2, m) == 0) {
          t.text = m;
          break;
        }
      }
      i += t.text.size();
    }
    out.push_back(std::move(t));
  }
  return out;
}

struct Macro {
  bool function_like = false;
  std::vector<std::string> params;  // "__VA_ARGS__" for "..."
  Tokens body;
};
using Macros = std::map<std::string, Macro>;

// A small C preprocessor: enough to expand the library's kernel-defining macros and evaluate its #if lines.
class Expander {
 public:
  explicit Expander(const Macros& macros) : macros_(macros) {}

  Status Expand(const Tokens& in, const std::set<std::string>& disabled, int depth, Tokens* out) const {
    if (depth > kMaxExpansionDepth) return Status::Error("macro expansion deeper than " + std::to_string(depth));
    for (size_t i = 0; i < in.size(); ++i) {
      const Token& t = in[i];
      auto m = t.kind == Token::kIdent && !disabled.count(t.text) ? macros_.find(t.text) : macros_.end();
      if (m == macros_.end()) {
        out->push_back(t);
        continue;
      }
      std::set<std::string> inner = disabled;
      inner.insert(t.text);
      if (!m->second.function_like) {
        Tokens body = m->second.body;
        if (!body.empty()) body[0].space_before = t.space_before;
        SDGPU_RETURN_IF_ERROR(Expand(body, inner, depth + 1, out));
        continue;
      }
      if (i + 1 >= in.size() || in[i + 1].text != "(") {  // a function-like macro's name without arguments
        out->push_back(t);
        continue;
      }
      std::vector<Tokens> args;
      size_t j = i + 1;
      SDGPU_RETURN_IF_ERROR(CollectArgs(in, &j, &args));
      Tokens substituted;
      SDGPU_RETURN_IF_ERROR(Substitute(m->second, args, disabled, depth, &substituted));
      if (!substituted.empty()) substituted[0].space_before = t.space_before;
      SDGPU_RETURN_IF_ERROR(Expand(substituted, inner, depth + 1, out));
      i = j;
    }
    return Status::Ok();
  }

  // in[*pos] is "("; on return *pos is the index of the matching ")".
  static Status CollectArgs(const Tokens& in, size_t* pos, std::vector<Tokens>* args) {
    int depth = 0;
    args->assign(1, Tokens());
    for (size_t k = *pos; k < in.size(); ++k) {
      const std::string& x = in[k].text;
      if (in[k].kind == Token::kPunct && x == "(") {
        if (depth++ == 0) continue;
      } else if (in[k].kind == Token::kPunct && x == ")") {
        if (--depth == 0) {
          *pos = k;
          if (args->size() == 1 && args->front().empty()) args->clear();  // FOO()
          return Status::Ok();
        }
      } else if (in[k].kind == Token::kPunct && x == "," && depth == 1) {
        args->emplace_back();
        continue;
      }
      args->back().push_back(in[k]);
    }
    return Status::Error("unbalanced macro arguments");
  }

 private:
  Status Substitute(const Macro& m, const std::vector<Tokens>& args, const std::set<std::string>& disabled, int depth,
                    Tokens* out) const {
    const bool variadic = !m.params.empty() && m.params.back() == "__VA_ARGS__";
    if (args.size() != m.params.size() && !(variadic && args.size() >= m.params.size() - 1) &&
        !(m.params.empty() && args.empty())) {
      return Status::Error("macro called with " + std::to_string(args.size()) + " argument(s), it takes " +
                           std::to_string(m.params.size()));
    }
    auto arg_of = [&](const std::string& name, Tokens* value) {
      for (size_t p = 0; p < m.params.size(); ++p) {
        if (m.params[p] != name) continue;
        value->clear();
        if (variadic && p + 1 == m.params.size()) {
          for (size_t a = p; a < args.size(); ++a) {
            if (a > p) value->push_back(Token{Token::kPunct, ",", false});
            value->insert(value->end(), args[a].begin(), args[a].end());
          }
        } else if (p < args.size()) {
          *value = args[p];
        }
        return true;
      }
      return false;
    };
    Tokens pasted;  // after parameter substitution, "##" still to apply
    const Tokens& b = m.body;
    for (size_t k = 0; k < b.size(); ++k) {
      Tokens value;
      if (b[k].text == "#" && b[k].kind == Token::kPunct && k + 1 < b.size() && arg_of(b[k + 1].text, &value)) {
        std::string s = "\"";
        for (const Token& v : value) s += (v.space_before && s.size() > 1 ? " " : "") + v.text;
        pasted.push_back(Token{Token::kString, s + "\"", b[k].space_before});
        ++k;
        continue;
      }
      if (b[k].kind == Token::kIdent && arg_of(b[k].text, &value)) {
        const bool next_paste = k + 1 < b.size() && b[k + 1].text == "##";
        const bool prev_paste = k > 0 && b[k - 1].text == "##";
        Tokens expanded;
        if (next_paste || prev_paste) {
          expanded = value;
        } else {
          SDGPU_RETURN_IF_ERROR(Expand(value, disabled, depth + 1, &expanded));
        }
        if (!expanded.empty()) expanded[0].space_before = b[k].space_before;
        pasted.insert(pasted.end(), expanded.begin(), expanded.end());
        continue;
      }
      pasted.push_back(b[k]);
    }
    for (size_t k = 0; k < pasted.size(); ++k) {
      if (pasted[k].kind == Token::kPunct && pasted[k].text == "##") {
        if (out->empty() || k + 1 >= pasted.size()) return Status::Error("## at the edge of a macro body");
        Token& left = out->back();
        left.text += pasted[k + 1].text;
        if (IsIdStart(left.text[0])) left.kind = Token::kIdent;
        ++k;
        continue;
      }
      out->push_back(pasted[k]);
    }
    return Status::Ok();
  }

  const Macros& macros_;
};

// The names of the kernels `__kernel [__attribute__((...))]* void NAME (` that `t` defines.
Status KernelNames(const Tokens& t, std::vector<std::string>* names) {
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i].kind != Token::kIdent || (t[i].text != "__kernel" && t[i].text != "kernel")) continue;
    size_t j = i + 1;
    while (j < t.size() && (t[j].text == "__attribute__" || t[j].text == "__attribute")) {
      ++j;
      int depth = 0;
      for (; j < t.size(); ++j) {
        if (t[j].text == "(") ++depth;
        if (t[j].text == ")" && --depth == 0) break;
      }
      ++j;
    }
    if (j + 2 >= t.size() || t[j].text != "void" || t[j + 1].kind != Token::kIdent || t[j + 2].text != "(") {
      return Status::Error("a __kernel that is not `__kernel void NAME(`");
    }
    names->push_back(t[j + 1].text);
    i = j + 2;
  }
  return Status::Ok();
}

// #if expression evaluation (C rules on integers; `defined` already replaced).
class IfEvaluator {
 public:
  explicit IfEvaluator(const Tokens& t) : t_(t) {}
  Status Eval(long long* out) {
    SDGPU_RETURN_IF_ERROR(Ternary(out));
    if (pos_ != t_.size()) return Status::Error("unexpected '" + t_[pos_].text + "' in #if");
    return Status::Ok();
  }

 private:
  bool Take(const char* p) {
    if (pos_ < t_.size() && t_[pos_].kind == Token::kPunct && t_[pos_].text == p) {
      ++pos_;
      return true;
    }
    return false;
  }
  Status Ternary(long long* v) {
    SDGPU_RETURN_IF_ERROR(Binary(0, v));
    if (!Take("?")) return Status::Ok();
    long long a = 0, b = 0;
    SDGPU_RETURN_IF_ERROR(Ternary(&a));
    if (!Take(":")) return Status::Error("?: without ':' in #if");
    SDGPU_RETURN_IF_ERROR(Ternary(&b));
    *v = *v ? a : b;
    return Status::Ok();
  }
  static int Precedence(const std::string& op) {
    static const std::map<std::string, int> kPrec = {
        {"||", 1}, {"&&", 2}, {"|", 3}, {"^", 4}, {"&", 5}, {"==", 6}, {"!=", 6}, {"<", 7}, {">", 7}, {"<=", 7},
        {">=", 7}, {"<<", 8}, {">>", 8}, {"+", 9}, {"-", 9}, {"*", 10}, {"/", 10}, {"%", 10}};
    auto it = kPrec.find(op);
    return it == kPrec.end() ? -1 : it->second;
  }
  Status Binary(int min_prec, long long* v) {
    SDGPU_RETURN_IF_ERROR(Unary(v));
    while (pos_ < t_.size() && t_[pos_].kind == Token::kPunct) {
      const std::string op = t_[pos_].text;
      const int prec = Precedence(op);
      if (prec < 0 || prec < min_prec) break;
      ++pos_;
      long long r = 0;
      SDGPU_RETURN_IF_ERROR(Binary(prec + 1, &r));
      if ((op == "/" || op == "%") && r == 0) return Status::Error("division by zero in #if");
      *v = op == "||" ? (*v || r) : op == "&&" ? (*v && r) : op == "|" ? (*v | r) : op == "^" ? (*v ^ r)
         : op == "&" ? (*v & r) : op == "==" ? (*v == r) : op == "!=" ? (*v != r) : op == "<" ? (*v < r)
         : op == ">" ? (*v > r) : op == "<=" ? (*v <= r) : op == ">=" ? (*v >= r) : op == "<<" ? (*v << r)
         : op == ">>" ? (*v >> r) : op == "+" ? (*v + r) : op == "-" ? (*v - r) : op == "*" ? (*v * r)
         : op == "/" ? (*v / r) : (*v % r);
    }
    return Status::Ok();
  }
  Status Unary(long long* v) {
    if (Take("!")) {
      SDGPU_RETURN_IF_ERROR(Unary(v));
      *v = !*v;
      return Status::Ok();
    }
    if (Take("-") || Take("~") || Take("+")) {
      const std::string op = t_[pos_ - 1].text;
      SDGPU_RETURN_IF_ERROR(Unary(v));
      *v = op == "-" ? -*v : op == "~" ? ~*v : *v;
      return Status::Ok();
    }
    if (Take("(")) {
      SDGPU_RETURN_IF_ERROR(Ternary(v));
      return Take(")") ? Status::Ok() : Status::Error("unbalanced parentheses in #if");
    }
    if (pos_ >= t_.size()) return Status::Error("#if expression ends early");
    const Token& t = t_[pos_++];
    if (t.kind == Token::kIdent) {  // not a macro: 0 (C rule)
      *v = 0;
      return Status::Ok();
    }
    if (t.kind != Token::kNumber) return Status::Error("unexpected '" + t.text + "' in #if");
    std::string digits = t.text;
    while (!digits.empty() && std::strchr("uUlL", digits.back()) != nullptr) digits.pop_back();
    char* end = nullptr;
    *v = std::strtoll(digits.c_str(), &end, 0);
    if (end == digits.c_str() || *end != '\0') return Status::Error("bad number '" + t.text + "' in #if");
    return Status::Ok();
  }

  const Tokens& t_;
  size_t pos_ = 0;
};

// The source scanner: walks the top level of the library, runs its directives, records the kernel units.
class Scanner {
 public:
  Scanner(const std::string& s, const std::map<std::string, std::string>& defines) : s_(s) {
    for (const auto& [name, value] : defines) macros_[name] = Macro{false, {}, Tokenize(value)};
  }

  struct Found {
    size_t begin, end;
    std::vector<std::string> kernels;
    int open_ifs;
    // A function outside kernel units: its name, and whether this item is its prototype or its definition
    std::string function;
    bool prototype = false;
    // The identifiers a kernel unit or a function definition uses, macros expanded (ComposeUnit: which forward
    // declared functions a unit needs)
    std::set<std::string> uses;
  };

  // `decls`: the functions' prototypes and definitions (KernelLibrary::ComposeUnit follows forward declarations).
  Status Run(std::vector<Found>* units, std::vector<Found>* decls) {
    size_t i = 0;
    while (true) {
      i = SkipSpace(i);
      if (i >= s_.size()) break;
      if (s_[i] == '#') {
        std::string text;
        const size_t end = ReadDirective(i, &text);
        SDGPU_RETURN_IF_ERROR(Directive(text));
        i = end;
        continue;
      }
      if (!Active()) {  // a dead branch: only its directives matter (it may use macros defined elsewhere)
        i = LineCommentEnd(i);
        continue;
      }
      Found f;
      f.begin = i;
      f.end = 0;
      f.open_ifs = static_cast<int>(frames_.size());
      SDGPU_RETURN_IF_ERROR(Item(i, &f));
      i = f.end;
      if (!f.kernels.empty()) {
        units->push_back(std::move(f));
      } else if (!f.function.empty()) {
        decls->push_back(std::move(f));
      }
    }
    if (!frames_.empty()) return Status::Error("#if without #endif");
    return Status::Ok();
  }

 private:
  struct Frame {
    bool parent_active, active, taken;
  };

  bool Active() const { return frames_.empty() || frames_.back().active; }

  // Skips whitespace, comments and line splices; returns the next significant offset.
  size_t SkipSpace(size_t i) const {
    while (i < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[i]))) {
        ++i;
      } else if (s_[i] == '\\' && i + 1 < s_.size() && s_[i + 1] == '\n') {
        i += 2;
      } else if (s_.compare(i, 2, "//") == 0) {
        i = LineCommentEnd(i);
      } else if (s_.compare(i, 2, "/*") == 0) {
        const size_t e = s_.find("*/", i + 2);
        i = e == std::string::npos ? s_.size() : e + 2;
      } else {
        break;
      }
    }
    return i;
  }
  // The offset of the newline ending the // comment at i (a backslash-newline continues it).
  size_t LineCommentEnd(size_t i) const {
    while (i < s_.size() && s_[i] != '\n') i += (s_[i] == '\\' && i + 1 < s_.size() && s_[i + 1] == '\n') ? 2 : 1;
    return i;
  }
  size_t LiteralEnd(size_t i) const {
    const char q = s_[i];
    for (++i; i < s_.size() && s_[i] != q && s_[i] != '\n'; i += s_[i] == '\\' ? 2 : 1) {
    }
    return std::min(i + 1, s_.size());
  }

  // The logical line of the directive at `i` (splices joined, comments dropped); returns the offset after it.
  size_t ReadDirective(size_t i, std::string* text) const {
    size_t j = i + 1;
    while (j < s_.size() && s_[j] != '\n') {
      if (s_[j] == '\\' && j + 1 < s_.size() && s_[j + 1] == '\n') {
        j += 2;
      } else if (s_.compare(j, 2, "/*") == 0) {
        const size_t e = s_.find("*/", j + 2);
        j = e == std::string::npos ? s_.size() : e + 2;
        *text += ' ';
      } else if (s_.compare(j, 2, "//") == 0) {
        j = LineCommentEnd(j);
      } else if (s_[j] == '"' || s_[j] == '\'') {
        const size_t e = LiteralEnd(j);
        *text += s_.substr(j, e - j);
        j = e;
      } else {
        *text += s_[j++];
      }
    }
    return j;
  }

  Status Directive(const std::string& line) {
    size_t k = 0;
    while (k < line.size() && std::isspace(static_cast<unsigned char>(line[k]))) ++k;
    size_t e = k;
    while (e < line.size() && IsIdChar(line[e])) ++e;
    const std::string name = line.substr(k, e - k), rest = line.substr(e);
    if (name == "if" || name == "ifdef" || name == "ifndef") {
      bool value = false;
      if (Active()) {
        if (name == "if") {
          long long v = 0;
          SDGPU_RETURN_IF_ERROR(EvalIf(rest, &v));
          value = v != 0;
        } else {
          const Tokens t = Tokenize(rest);
          if (t.empty() || t[0].kind != Token::kIdent) return Status::Error("#" + name + " without a name");
          value = (macros_.count(t[0].text) != 0) == (name == "ifdef");
        }
      }
      frames_.push_back(Frame{Active(), Active() && value, Active() && value});
    } else if (name == "elif") {
      if (frames_.empty()) return Status::Error("#elif without #if");
      Frame& f = frames_.back();
      bool value = false;
      if (f.parent_active && !f.taken) {
        long long v = 0;
        SDGPU_RETURN_IF_ERROR(EvalIf(rest, &v));
        value = v != 0;
      }
      f.active = f.parent_active && !f.taken && value;
      f.taken = f.taken || f.active;
    } else if (name == "else") {
      if (frames_.empty()) return Status::Error("#else without #if");
      Frame& f = frames_.back();
      f.active = f.parent_active && !f.taken;
      f.taken = true;
    } else if (name == "endif") {
      if (frames_.empty()) return Status::Error("#endif without #if");
      frames_.pop_back();
    } else if (!Active()) {
      return Status::Ok();
    } else if (name == "define") {
      return Define(rest);
    } else if (name == "undef") {
      const Tokens t = Tokenize(rest);
      if (!t.empty()) macros_.erase(t[0].text);
    } else if (name == "include") {
      return Status::Error("#include in the kernel library");
    }
    return Status::Ok();  // #pragma, #error (in a dead branch), #line, ...
  }

  Status Define(const std::string& rest) {
    size_t k = 0;
    while (k < rest.size() && std::isspace(static_cast<unsigned char>(rest[k]))) ++k;
    size_t e = k;
    while (e < rest.size() && IsIdChar(rest[e])) ++e;
    if (e == k) return Status::Error("#define without a name");
    Macro m;
    const std::string name = rest.substr(k, e - k);
    if (e < rest.size() && rest[e] == '(') {  // function-like: '(' right after the name
      m.function_like = true;
      const size_t close = rest.find(')', e);
      if (close == std::string::npos) return Status::Error("#define " + name + ": unbalanced parameter list");
      for (const Token& p : Tokenize(rest.substr(e + 1, close - e - 1))) {
        if (p.kind == Token::kIdent) m.params.push_back(p.text);
        if (p.text == ".") {
          if (m.params.empty() || m.params.back() != "__VA_ARGS__") m.params.push_back("__VA_ARGS__");
        }
      }
      m.body = Tokenize(rest.substr(close + 1));
    } else {
      m.body = Tokenize(rest.substr(e));
    }
    macros_[name] = std::move(m);
    return Status::Ok();
  }

  Status EvalIf(const std::string& expr, long long* v) {
    const Tokens raw = Tokenize(expr);
    Tokens t;
    for (size_t i = 0; i < raw.size(); ++i) {  // `defined X` / `defined(X)` before macro expansion
      if (raw[i].kind == Token::kIdent && raw[i].text == "defined") {
        const bool paren = i + 1 < raw.size() && raw[i + 1].text == "(";
        const size_t n = i + (paren ? 2 : 1);
        if (n >= raw.size() || raw[n].kind != Token::kIdent || (paren && (n + 1 >= raw.size() || raw[n + 1].text != ")"))) {
          return Status::Error("malformed defined() in #if " + expr);
        }
        t.push_back(Token{Token::kNumber, macros_.count(raw[n].text) ? "1" : "0", true});
        i = n + (paren ? 1 : 0);
        continue;
      }
      t.push_back(raw[i]);
    }
    Tokens expanded;
    SDGPU_RETURN_IF_ERROR(Expander(macros_).Expand(t, {}, 0, &expanded));
    Status s = IfEvaluator(expanded).Eval(v);
    return s.ok() ? s : Status::Error(s.message() + " (#if" + expr + ")");
  }

  // One top-level item starting at `begin`: sets f->end and, for a kernel unit, f->kernels.
  Status Item(size_t begin, Found* f) {
    // A macro instantiation: IDENT(args) where IDENT is a function-like macro of the library.
    size_t i = begin;
    if (IsIdStart(s_[i])) {
      size_t e = i;
      while (e < s_.size() && IsIdChar(s_[e])) ++e;
      auto m = macros_.find(s_.substr(i, e - i));
      const size_t open = SkipSpace(e);
      if (m != macros_.end() && m->second.function_like && open < s_.size() && s_[open] == '(') {
        size_t close = 0;
        SDGPU_RETURN_IF_ERROR(Matching(open, '(', ')', &close));
        f->end = close + 1;
        const size_t semi = SkipSpace(f->end);
        if (semi < s_.size() && s_[semi] == ';') f->end = semi + 1;
        Tokens expanded;
        SDGPU_RETURN_IF_ERROR(Expander(macros_).Expand(Tokenize(s_.substr(begin, close + 1 - begin)), {}, 0,
                                                       &expanded));
        for (const Token& e : expanded) {
          if (e.kind == Token::kIdent) f->uses.insert(e.text);
        }
        return KernelNames(expanded, &f->kernels);
      }
    }
    // Anything else ends at a ';' or at the '}' closing a body, at nesting depth 0.
    int depth = 0;
    while (i < s_.size()) {
      const char c = s_[i];
      if (c == '/' && (s_.compare(i, 2, "//") == 0 || s_.compare(i, 2, "/*") == 0)) {
        i = SkipSpace(i);
        continue;
      }
      if (c == '"' || c == '\'') {
        i = LiteralEnd(i);
        continue;
      }
      if (c == '#' && AtLineStart(i)) {  // a directive inside a body (#pragma unroll, a local #define)
        std::string ignored;
        i = ReadDirective(i, &ignored);
        continue;
      }
      if (c == '(' || c == '[') ++depth;
      if (c == ')' || c == ']') --depth;
      if (depth < 0) return Status::Error("unbalanced ')' at offset " + std::to_string(i));
      if (c == ';' && depth == 0) {
        f->end = i + 1;
        Tokens head;
        SDGPU_RETURN_IF_ERROR(ExpandedHead(begin, i, &head));
        f->function = FunctionName(head);
        f->prototype = true;
        return Status::Ok();
      }
      if (c == '{' && depth == 0) {
        Tokens head;
        SDGPU_RETURN_IF_ERROR(ExpandedHead(begin, i, &head));
        size_t close = 0;
        SDGPU_RETURN_IF_ERROR(Matching(i, '{', '}', &close));
        if (std::any_of(head.begin(), head.end(), [](const Token& t) { return t.text == "="; })) {
          i = close + 1;  // an initializer: the item goes on to its ';'
          continue;
        }
        f->end = close + 1;
        const size_t semi = SkipSpace(f->end);
        if (semi < s_.size() && s_[semi] == ';') f->end = semi + 1;  // struct { ... };
        head.push_back(Token{Token::kPunct, "{", false});
        SDGPU_RETURN_IF_ERROR(KernelNames(head, &f->kernels));
        if (f->kernels.empty()) f->function = FunctionName(head);
        if (!f->kernels.empty() || !f->function.empty()) {
          Tokens body;
          SDGPU_RETURN_IF_ERROR(ExpandedHead(i, f->end, &body));
          for (const Token& e : body) {
            if (e.kind == Token::kIdent) f->uses.insert(e.text);
          }
        }
        return Status::Ok();
      }
      ++i;
    }
    return Status::Error("the source ends inside a top-level construct");
  }

  // The tokens of s_[begin, end) with the library's macros expanded (KERNEL -> __kernel, SD_INLINE, ...).
  Status ExpandedHead(size_t begin, size_t end, Tokens* out) const {
    return Expander(macros_).Expand(Tokenize(s_.substr(begin, end - begin)), {}, 0, out);
  }

  // The function a declaration or definition head names: the identifier before its first '(' outside
  // __attribute__((...)); "" when the head is not a function's (a variable, a struct, a prototype of a pointer).
  static std::string FunctionName(const Tokens& t) {
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i].text == "__attribute__" || t[i].text == "__attribute") {
        int depth = 0;
        for (++i; i < t.size(); ++i) {
          if (t[i].text == "(") ++depth;
          if (t[i].text == ")" && --depth == 0) break;
        }
        continue;
      }
      if (t[i].text == "=" || t[i].text == "[") return "";
      if (t[i].text == "(") return i > 0 && t[i - 1].kind == Token::kIdent ? t[i - 1].text : "";
    }
    return "";
  }

  bool AtLineStart(size_t i) const {
    while (i > 0 && (s_[i - 1] == ' ' || s_[i - 1] == '\t')) --i;
    return i == 0 || s_[i - 1] == '\n';
  }

  // The offset of the bracket closing the one at `open` (comments, literals and directives skipped).
  Status Matching(size_t open, char o, char c, size_t* close) const {
    int depth = 0;
    for (size_t i = open; i < s_.size();) {
      const char ch = s_[i];
      if (ch == '/' && (s_.compare(i, 2, "//") == 0 || s_.compare(i, 2, "/*") == 0)) {
        i = SkipSpace(i);
        continue;
      }
      if (ch == '"' || ch == '\'') {
        i = LiteralEnd(i);
        continue;
      }
      if (ch == '#' && AtLineStart(i)) {
        std::string ignored;
        i = ReadDirective(i, &ignored);
        continue;
      }
      if (ch == o) ++depth;
      if (ch == c && --depth == 0) {
        *close = i;
        return Status::Ok();
      }
      ++i;
    }
    return Status::Error(std::string("unbalanced '") + o + "' at offset " + std::to_string(open));
  }

  const std::string& s_;
  Macros macros_;
  std::vector<Frame> frames_;
};

}  // namespace

std::map<std::string, std::string> DefinesOf(const std::string& options) {
  std::map<std::string, std::string> out;
  const Tokens words = [&] {
    Tokens w;
    std::string cur;
    for (char c : options + " ") {
      if (std::isspace(static_cast<unsigned char>(c))) {
        if (!cur.empty()) w.push_back(Token{Token::kIdent, cur, false});
        cur.clear();
      } else {
        cur += c;
      }
    }
    return w;
  }();
  for (size_t i = 0; i < words.size(); ++i) {
    std::string d;
    if (words[i].text == "-D" && i + 1 < words.size()) {
      d = words[++i].text;
    } else if (words[i].text.compare(0, 2, "-D") == 0) {
      d = words[i].text.substr(2);
    } else {
      continue;
    }
    const size_t eq = d.find('=');
    out[d.substr(0, eq)] = eq == std::string::npos ? "1" : d.substr(eq + 1);
  }
  return out;
}

Status KernelLibrary::Parse(const std::string& source, const std::map<std::string, std::string>& defines,
                            KernelLibrary* out) {
  KernelLibrary lib;
  lib.source_ = source;
  std::vector<Scanner::Found> found, decls;
  Scanner scanner(lib.source_, defines);
  Status s = scanner.Run(&found, &decls);
  if (!s.ok()) return Status::Error("opencl: cannot split the kernel library: " + s.message());
  for (Scanner::Found& f : found) {
    const int index = static_cast<int>(lib.units_.size());
    for (const std::string& k : f.kernels) {
      if (!lib.unit_of_.emplace(k, index).second) {
        return Status::Error("opencl: cannot split the kernel library: kernel '" + k + "' defined twice");
      }
      lib.names_.push_back(k);
    }
    lib.units_.push_back(Unit{f.begin, f.end, std::move(f.kernels), f.open_ifs, std::move(f.uses)});
  }
  for (Scanner::Found& d : decls) {
    lib.decls_.push_back(Decl{d.end, std::move(d.function), d.prototype, d.open_ifs, std::move(d.uses)});
  }
  *out = std::move(lib);
  return Status::Ok();
}

int KernelLibrary::UnitOf(const std::string& kernel) const {
  auto it = unit_of_.find(kernel);
  return it == unit_of_.end() ? -1 : it->second;
}

std::string KernelLibrary::Compose(const std::set<int>& units) const {
  std::string out;
  out.reserve(source_.size());
  size_t at = 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units.count(static_cast<int>(u))) continue;
    const Unit& unit = units_[u];
    out.append(source_, at, unit.begin - at);
    for (size_t i = unit.begin; i < unit.end; ++i) {
      if (source_[i] == '\n') out += '\n';
    }
    at = unit.end;
  }
  out.append(source_, at, std::string::npos);
  return out;
}

std::string KernelLibrary::ComposeUnit(int unit) const {
  const Unit& last = units_.at(static_cast<size_t>(unit));
  // A function the text up to the unit declares but defines only later (the dialect prelude declares the NVIDIA
  // primitives of nv_ptx.cl, which follows the portable kernels): the program goes on to its definition.
  std::set<std::string> pending;
  for (const Decl& d : decls_) {
    if (d.end > last.end) break;
    if (d.prototype) {
      pending.insert(d.name);
    } else {
      pending.erase(d.name);
    }
  }
  // ... and that the unit or a function of its program uses (NVIDIA's portable units that take no shuffle stop at
  // their own end)
  for (auto it = pending.begin(); it != pending.end();) {
    bool used = last.uses.count(*it) != 0;
    for (const Decl& d : decls_) {
      if (used || d.end > last.end) break;
      used = !d.prototype && d.uses.count(*it) != 0;
    }
    it = used ? std::next(it) : pending.erase(it);
  }
  size_t end = last.end;
  int open_ifs = last.open_ifs;
  for (const Decl& d : decls_) {
    if (pending.empty()) break;
    if (d.end <= last.end || d.prototype || pending.erase(d.name) == 0) continue;
    end = d.end;
    open_ifs = d.open_ifs;
  }
  std::string out;
  out.reserve(end);
  size_t at = 0;
  for (size_t u = 0; u < units_.size() && units_[u].begin < end; ++u) {
    if (static_cast<int>(u) == unit) continue;
    const Unit& cut = units_[u];
    out.append(source_, at, cut.begin - at);
    for (size_t i = cut.begin; i < cut.end; ++i) {
      if (source_[i] == '\n') out += '\n';
    }
    at = cut.end;
  }
  out.append(source_, at, end - at);
  out += '\n';
  for (int i = 0; i < open_ifs; ++i) out += "#endif\n";
  return out;
}

}  // namespace sdgpu::ocl
