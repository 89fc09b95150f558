// frontend.h: the .xf front end. Sources and diagnostics (diag.c), the AST
// (ast.c), the flex lexer and bison parser (lexer.l, parser.y), loading of a
// file with its imports (source.c), and elaboration of the AST into a graph
// (elaborate.c).
//
// Errors: every user error goes through diag_error, which prints
//   file:line:col: error: message
//     source line
//     ^
// plus notes, and then longjmps to the handler set by the caller of the
// front end. All front-end memory is in one Arena, so nothing leaks.
#ifndef XF_FRONTEND_H
#define XF_FRONTEND_H

#include <setjmp.h>
#include <stdio.h>

#include "../ir/ir.h"

// ---- diag.c ----------------------------------------------------------------

typedef struct {
  const char *name;  // display name (as given, or "stdlib/x.xf")
  const char *path;  // filesystem path
  const char *text;  // NUL-terminated contents
  size_t len;
} Source;

typedef struct {
  Arena *arena;
  FILE *out;          // where messages go (stderr)
  Source **sources;
  int nsources, cap_sources;
  jmp_buf *on_error;  // longjmp target; required while compiling
} Diag;

Source *diag_add_source(Diag *d, const char *name, const char *path, const char *text, size_t len);
// Prints one message (kind "error" or "note") with the source line and caret.
void diag_print(Diag *d, const char *kind, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// Prints an error and longjmps to d->on_error.
_Noreturn void diag_error(Diag *d, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
_Noreturn void diag_fail(Diag *d);  // longjmp after messages were printed

// ---- AST (ast.c) ---------------------------------------------------------

typedef struct {
  void **items;
  int n, cap;
} Vec;
void vec_push(Arena *a, Vec *v, void *item);

typedef enum {
  EX_INT,     // num (exact integer)
  EX_FLOAT,   // num
  EX_NAME,    // name
  EX_BINARY,  // op in "+-*/%F@<>LGEN" (F //, L <=, G >=, E ==, N !=: binop_text), lhs, rhs; loc is the operator
  EX_NEG,     // -lhs
  EX_CALL,    // lhs(args)
  EX_LIST,    // [args]
  EX_REPEAT,  // repeat lhs { rhs }; name: `as name`, the item's index in rhs (NULL: none)
  EX_KEYWORD, // name = lhs: a keyword argument, only among a call's arguments
  EX_IF,      // if lhs { rhs } else { args[0] }: decided at construction
  EX_STRING,  // "name": a side output's name, only as side("name")
} ExprKind;

typedef struct Expr Expr;
struct Expr {
  ExprKind kind;
  Loc loc;
  double num;
  const char *name;
  char op;
  Expr *lhs, *rhs;
  Vec args;  // Expr*
};

typedef enum {
  ST_ASSIGN,  // name = value
  ST_RETURN,  // return value
  ST_OUTPUT,  // output name [= value]; value NULL means the local `name`
  ST_ASSERT,  // assert(value, "name"): a condition checked at construction
} StmtKind;

typedef struct {
  StmtKind kind;
  Loc loc;
  const char *name;
  Expr *value;
  Vec sides;  // ST_RETURN: Stmt* (name: value), the side outputs of `return y, name: value`
} Stmt;

typedef struct {
  const char *name;
  Loc loc;
  Expr *shape;  // EX_LIST annotation or NULL
  Expr *dflt;   // a block's or function's default value (`n = 4`), or NULL
} Arg;

typedef enum {
  MEM_CONFIG,   // config name = value        (models only)
  MEM_PARAM,    // param name [shape] = init
  MEM_LET,      // let name = value           (construction time)
  MEM_FORWARD,  // forward(args) { body }
  MEM_ASSERT,   // assert(value, "name")      (construction time)
  MEM_IF,       // if value { then } else { other } (construction time)
} MemberKind;

typedef struct {
  MemberKind kind;
  Loc loc;
  const char *name;
  Expr *shape;  // MEM_PARAM
  Expr *value;  // MEM_CONFIG, MEM_PARAM (initialiser), MEM_LET
  Vec args;     // Arg*   (MEM_FORWARD)
  Vec body;     // Stmt*  (MEM_FORWARD)
  Vec then, other;  // Member* (MEM_IF)
} Member;

typedef enum { DEF_BLOCK, DEF_FN, DEF_MODEL } DefKind;

typedef struct {
  DefKind kind;
  Loc loc;
  const char *name;
  Vec params;   // Arg*   (block and fn)
  Vec members;  // Member* (block and model)
  Vec body;     // Stmt*  (fn)
  bool noncausal;  // `noncausal model`: its outputs may read later positions
  const Source *src;
} Def;

typedef struct {
  const char *path;
  Loc loc;
  const char *alias;  // `import "path" as alias`: its names as alias.Name only; NULL: unqualified
  int module;         // the imported file's index in Program.modules (source.c)
} Import;

typedef struct {
  const Source *src;
  Vec imports;  // Import*
  Vec defs;     // Def*
} Module;

Expr *ast_expr(Arena *a, ExprKind kind, Loc loc);
void ast_dump(FILE *f, const Module *m);
// The source text of binary operator op (EX_BINARY): "+", "<=", "!=", ...
const char *binop_text(char op);

// ---- parser (parser.y, lexer.l) --------------------------------------------

// Parses src into a Module; reports syntax errors through d.
Module *parse_source(Diag *d, const Source *src);

// ---- source.c ----------------------------------------------------------------

typedef struct {
  const char **include_dirs;  // searched after the importing file's folder
  int ninclude;
  const char *stdlib_dir;     // searched last
} SearchPath;

typedef struct {
  Module **modules;  // [0] is the main file, then imports in load order
  int nmodules;
} Program;

// Reads and parses path and, transitively, every file it imports.
Program *load_program(Diag *d, const char *path, const SearchPath *sp);
// The same for text already in memory, named path in messages.
Program *load_program_text(Diag *d, const char *path, const char *text, size_t len, const SearchPath *sp);

// ---- elaborate.c -------------------------------------------------------------

typedef struct {
  const char *name;
  const char *value;  // text after '=' on the command line
} Define;

// Instantiates the one model of the main module with the given config
// overrides and builds its forward graph, checking every shape.
Graph *elaborate(Diag *d, Program *p, const Define *defs, int ndefs);

#endif
