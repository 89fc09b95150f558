/* parser.y: the .xf grammar (docs/language.md gives it in prose).
 *
 * A file is a list of imports, blocks, functions and one model. Statements
 * need no separators: a statement always starts with a name or a keyword,
 * and an expression never continues with one, so the grammar is LALR(1)
 * with no conflicts (bison checks this: %expect 0).
 *
 * The parser is pure and reentrant; syntax errors are recorded in the
 * Parser and reported by parse_source after yyparse returns, so no memory
 * of bison or flex is lost on an error.
 */
%code requires {
#include "frontend.h"
typedef struct Parser {
  Diag *d;
  const Source *src;
  Module *mod;
  Arena *a;
  int failed;
  Loc err_loc;
  char err[512];
  int end_line, end_col;  // just after the last token read
} Parser;
typedef void *yyscan_t;
}

%code {
#include <string.h>
static Loc L(Parser *P, YYLTYPE l) { return (Loc){P->src->name, l.first_line, l.first_column}; }
int yylex(YYSTYPE *lval, YYLTYPE *lloc, yyscan_t scanner);
static void yyerror(YYLTYPE *lloc, yyscan_t scanner, Parser *P, const char *msg);
static Expr *bin(Parser *P, char op, Expr *l, Expr *r, YYLTYPE loc) {
  Expr *e = ast_expr(P->a, EX_BINARY, L(P, loc));
  e->op = op, e->lhs = l, e->rhs = r;
  return e;
}
static Member *member(Parser *P, MemberKind k, YYLTYPE loc, const char *name) {
  Member *m = arena_alloc(P->a, sizeof *m);
  m->kind = k, m->loc = L(P, loc), m->name = name;
  return m;
}
static Stmt *stmt(Parser *P, StmtKind k, YYLTYPE loc, const char *name, Expr *v) {
  Stmt *s = arena_alloc(P->a, sizeof *s);
  s->kind = k, s->loc = L(P, loc), s->name = name, s->value = v;
  return s;
}
static Def *def(Parser *P, DefKind k, YYLTYPE loc, const char *name) {
  Def *d = arena_alloc(P->a, sizeof *d);
  d->kind = k, d->loc = L(P, loc), d->name = name, d->src = P->src;
  vec_push(P->a, &P->mod->defs, d);
  return d;
}
}

%define api.pure full
%define parse.error detailed
%locations
%lex-param {yyscan_t scanner}
%parse-param {yyscan_t scanner} {Parser *P}
%expect 0

%union {
  double num;
  const char *str;
  Expr *expr;
  Stmt *stmt;
  Member *mem;
  Arg *arg;
  Vec vec;
}

%token <num> INT "integer" FLOAT "number"
%token <str> IDENT "name" STRING "string" QNAME "qualified name"
%token BLOCK "'block'" FN "'fn'" MODEL "'model'" IMPORT "'import'" CONFIG "'config'"
%token PARAM "'param'" LET "'let'" FORWARD "'forward'" RETURN "'return'"
%token OUTPUT "'output'" REPEAT "'repeat'" NONCAUSAL "'noncausal'" AS "'as'"
%token IF "'if'" ELSE "'else'" ASSERT "'assert'"
%token LEXERROR "invalid token"
%token EQEQ "'=='" NEQ "'!='" LEQ "'<='" GEQ "'>='" FLOORDIV "'//'"

%type <expr> expr postfix primary list shape_opt arg
%type <vec> exprs exprs_opt args args_opt params params_opt members stmts config_items sides
%type <stmt> stmt
%type <mem> member config_item
%type <arg> param

%nonassoc EQEQ NEQ '<' '>' LEQ GEQ
%left '+' '-'
%left '*' '/' '%' FLOORDIV '@'
%precedence UMINUS
%%

file: %empty
    | file item
    ;

item: IMPORT STRING {
        Import *im = arena_alloc(P->a, sizeof *im);
        im->path = $2, im->loc = L(P, @2);
        vec_push(P->a, &P->mod->imports, im);
      }
    | IMPORT STRING AS IDENT {
        Import *im = arena_alloc(P->a, sizeof *im);
        im->path = $2, im->loc = L(P, @2), im->alias = $4;
        vec_push(P->a, &P->mod->imports, im);
      }
    | BLOCK IDENT '(' params_opt ')' '{' members '}' {
        Def *d = def(P, DEF_BLOCK, @2, $2);
        d->params = $4, d->members = $7;
      }
    | FN IDENT '(' params_opt ')' '{' stmts '}' {
        Def *d = def(P, DEF_FN, @2, $2);
        d->params = $4, d->body = $7;
      }
    | MODEL IDENT '{' members '}' {
        Def *d = def(P, DEF_MODEL, @2, $2);
        d->members = $4;
      }
    | NONCAUSAL MODEL IDENT '{' members '}' {
        Def *d = def(P, DEF_MODEL, @3, $3);
        d->members = $5, d->noncausal = true;
      }
    ;

params_opt: %empty { $$ = (Vec){0}; }
          | params
          ;
params: param { $$ = (Vec){0}; vec_push(P->a, &$$, $1); }
      | params ',' param { $$ = $1; vec_push(P->a, &$$, $3); }
      ;
param: IDENT shape_opt {
         $$ = arena_alloc(P->a, sizeof *$$);
         $$->name = $1, $$->loc = L(P, @1), $$->shape = $2;
       }
     | IDENT '=' expr {
         $$ = arena_alloc(P->a, sizeof *$$);
         $$->name = $1, $$->loc = L(P, @1), $$->dflt = $3;
       }
     ;
shape_opt: %empty { $$ = NULL; }
         | list
         ;

members: %empty { $$ = (Vec){0}; }
       | members member { $$ = $1; vec_push(P->a, &$$, $2); }
       | members CONFIG config_items {
           $$ = $1;
           for (int i = 0; i < $3.n; i++) vec_push(P->a, &$$, $3.items[i]);
         }
       ;
config_items: config_item { $$ = (Vec){0}; vec_push(P->a, &$$, $1); }
            | config_items ',' config_item { $$ = $1; vec_push(P->a, &$$, $3); }
            ;
config_item: IDENT '=' expr { $$ = member(P, MEM_CONFIG, @1, $1); $$->value = $3; }
           ;
member: PARAM IDENT list '=' expr {
          $$ = member(P, MEM_PARAM, @2, $2);
          $$->shape = $3, $$->value = $5;
        }
      | LET IDENT '=' expr { $$ = member(P, MEM_LET, @2, $2); $$->value = $4; }
      | FORWARD '(' params_opt ')' '{' stmts '}' {
          $$ = member(P, MEM_FORWARD, @1, "forward");
          $$->args = $3, $$->body = $6;
        }
      | ASSERT '(' expr ',' STRING ')' { $$ = member(P, MEM_ASSERT, @1, $5); $$->value = $3; }
      | IF expr '{' members '}' { $$ = member(P, MEM_IF, @1, "if"); $$->value = $2, $$->then = $4; }
      | IF expr '{' members '}' ELSE '{' members '}' {
          $$ = member(P, MEM_IF, @1, "if");
          $$->value = $2, $$->then = $4, $$->other = $8;
        }
      ;

stmts: %empty { $$ = (Vec){0}; }
     | stmts stmt { $$ = $1; vec_push(P->a, &$$, $2); }
     ;
stmt: IDENT '=' expr { $$ = stmt(P, ST_ASSIGN, @1, $1, $3); }
    | RETURN expr { $$ = stmt(P, ST_RETURN, @1, NULL, $2); }
    | RETURN expr sides { $$ = stmt(P, ST_RETURN, @1, NULL, $2); $$->sides = $3; }
    | OUTPUT IDENT '=' expr { $$ = stmt(P, ST_OUTPUT, @1, $2, $4); }
    | OUTPUT IDENT { $$ = stmt(P, ST_OUTPUT, @1, $2, NULL); }
    | ASSERT '(' expr ',' STRING ')' { $$ = stmt(P, ST_ASSERT, @1, $5, $3); }
    ;

sides: ',' IDENT ':' expr { $$ = (Vec){0}; vec_push(P->a, &$$, stmt(P, ST_ASSIGN, @2, $2, $4)); }
     | sides ',' IDENT ':' expr { $$ = $1; vec_push(P->a, &$$, stmt(P, ST_ASSIGN, @3, $3, $5)); }
     ;

expr: expr '+' expr { $$ = bin(P, '+', $1, $3, @2); }
    | expr '-' expr { $$ = bin(P, '-', $1, $3, @2); }
    | expr '*' expr { $$ = bin(P, '*', $1, $3, @2); }
    | expr '/' expr { $$ = bin(P, '/', $1, $3, @2); }
    | expr '%' expr { $$ = bin(P, '%', $1, $3, @2); }
    | expr FLOORDIV expr { $$ = bin(P, 'F', $1, $3, @2); }
    | expr '@' expr { $$ = bin(P, '@', $1, $3, @2); }
    | expr '<' expr { $$ = bin(P, '<', $1, $3, @2); }
    | expr '>' expr { $$ = bin(P, '>', $1, $3, @2); }
    | expr LEQ expr { $$ = bin(P, 'L', $1, $3, @2); }
    | expr GEQ expr { $$ = bin(P, 'G', $1, $3, @2); }
    | expr EQEQ expr { $$ = bin(P, 'E', $1, $3, @2); }
    | expr NEQ expr { $$ = bin(P, 'N', $1, $3, @2); }
    | '-' expr %prec UMINUS { $$ = ast_expr(P->a, EX_NEG, L(P, @1)); $$->lhs = $2; }
    | postfix
    ;
postfix: primary
       | postfix '(' args_opt ')' {
           $$ = ast_expr(P->a, EX_CALL, $1->loc);
           $$->lhs = $1, $$->args = $3;
         }
       ;
primary: INT { $$ = ast_expr(P->a, EX_INT, L(P, @1)); $$->num = $1; }
       | FLOAT { $$ = ast_expr(P->a, EX_FLOAT, L(P, @1)); $$->num = $1; }
       | IDENT { $$ = ast_expr(P->a, EX_NAME, L(P, @1)); $$->name = $1; }
       | QNAME { $$ = ast_expr(P->a, EX_NAME, L(P, @1)); $$->name = $1; }
       | STRING { $$ = ast_expr(P->a, EX_STRING, L(P, @1)); $$->name = $1; }
       | '(' expr ')' { $$ = $2; }
       | list
       | REPEAT postfix '{' expr '}' {
           $$ = ast_expr(P->a, EX_REPEAT, L(P, @1));
           $$->lhs = $2, $$->rhs = $4;
         }
       | IF expr '{' expr '}' ELSE '{' expr '}' {
           $$ = ast_expr(P->a, EX_IF, L(P, @1));
           $$->lhs = $2, $$->rhs = $4;
           vec_push(P->a, &$$->args, $8);
         }
       | REPEAT postfix AS IDENT '{' expr '}' {
           $$ = ast_expr(P->a, EX_REPEAT, L(P, @1));
           $$->lhs = $2, $$->name = $4, $$->rhs = $6;
         }
       ;
list: '[' exprs_opt ']' { $$ = ast_expr(P->a, EX_LIST, L(P, @1)); $$->args = $2; }
    ;
args_opt: %empty { $$ = (Vec){0}; }
        | args
        ;
args: arg { $$ = (Vec){0}; vec_push(P->a, &$$, $1); }
    | args ',' arg { $$ = $1; vec_push(P->a, &$$, $3); }
    ;
arg: expr
   | IDENT '=' expr {
       $$ = ast_expr(P->a, EX_KEYWORD, L(P, @1));
       $$->name = $1, $$->lhs = $3;
     }
   ;
exprs_opt: %empty { $$ = (Vec){0}; }
         | exprs
         ;
exprs: expr { $$ = (Vec){0}; vec_push(P->a, &$$, $1); }
     | exprs ',' expr { $$ = $1; vec_push(P->a, &$$, $3); }
     ;
%%

static void yyerror(YYLTYPE *lloc, yyscan_t scanner, Parser *P, const char *msg) {
  (void)scanner;
  if (P->failed) return;
  P->failed = 1;
  P->err_loc = L(P, *lloc);
  const char *prefix = "syntax error, ";
  if (!strncmp(msg, prefix, strlen(prefix))) msg += strlen(prefix);
  // Lists are left-recursive, so only nesting grows the parser's stack.
  if (!strcmp(msg, "memory exhausted"))
    snprintf(P->err, sizeof P->err, "expression is nested too deeply (more than %d parser levels)", YYMAXDEPTH);
  else
    snprintf(P->err, sizeof P->err, "%s", msg);
}
