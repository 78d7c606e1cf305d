"""Spanish → English software vocabulary for lexical search.

The embedding model is multilingual, but BM25 and exact matching are not: "¿cómo ejecuto las
pruebas?" shares no word with a README that says "run the tests". Questions are expanded with the
English terms of the Spanish software words they use: the terms join the FTS query, and are
appended in parentheses to the question that is embedded (which helped the multilingual model
too: see ``retrieve.Options``). The list is general software vocabulary, matched by word stem,
not tuned to any repository.
"""

from __future__ import annotations

import re

# stem (matched at the start of a lower-cased word, accents kept) -> English terms
_ES_EN: dict[str, str] = {
    "abre": "open", "abrir": "open", "acces": "access", "activar": "activate enable",
    "activaci": "activation enable", "activad": "activated enabled", "actualiz": "update",
    "atómic": "atomic atomically", "atomic": "atomic atomically", "cambi": "change changes",
    "compilaci": "compile build", "compilar": "compile build", "construcci": "build builds",
    "construir": "build", "construy": "build builds", "construid": "built build",
    "reemplaz": "replace", "intercambi": "swap", "interrump": "interrupt",
    "advertencia": "warning", "ajuste": "setting settings", "almacen": "store storage",
    "analiz": "parse analyse", "archiv": "file files", "argument": "argument arguments",
    "arranc": "start startup", "autentic": "authentication auth", "ayuda": "help",
    "borr": "delete remove", "búsqueda": "search", "busca": "search find",
    "cabecera": "header headers",
    "caché": "cache", "cadena": "string", "campo": "field fields", "canal": "channel",
    "carga": "load", "carpeta": "folder directory", "cierr": "close", "cita": "citation cite",
    "clase": "class", "clave": "key", "cliente": "client", "códig": "code", "codific": "encode",
    "colecci": "collection collections", "columna": "column", "comando": "command",
    "comentario": "comment comments", "comprob": "check verify", "comprim": "compress",
    "conexi": "connection connect", "configur": "configure config configuration settings",
    "contexto": "context", "contraseña": "password", "convers": "conversation",
    "copia": "copy", "correo": "email mail", "crea": "create", "cuerpo": "body",
    "datos": "data", "decodific": "decode", "defecto": "default", "defin": "define definition",
    "depend": "dependency dependencies", "descarg": "download", "descomprim": "decompress decode",
    "desaf": "challenge", "devuelv": "return returns", "devuelve": "return returns",
    "dirección": "address url", "divid": "split chunk", "documenta": "documentation docs",
    "ejecut": "run execute", "ejemplo": "example", "elimin": "delete remove",
    "encabezado": "heading header", "enlace": "link", "entorno": "environment env",
    "entrada": "input entry", "enví": "send", "envi": "send", "error": "error",
    "escritura": "write", "espera": "wait timeout", "estado": "state status",
    "evalua": "eval evaluation", "excepci": "exception", "extrae": "extract",
    "fallo": "failure bug", "falla": "fail failure", "fecha": "date", "fragment": "chunk chunks",
    "fuente": "source sources", "función": "function", "funcion": "function",
    "genera": "generate", "guarda": "save store", "hilo": "thread", "incidencia": "issue issues",
    "índice": "index", "indexa": "index indexing", "inicia": "start init", "instal": "install",
    "juez": "judge", "lectura": "read", "lee": "read", "lenguaje": "language", "límite": "limit",
    "lista": "list", "llama": "call calls", "mensaje": "message", "método": "method",
    "modelo": "model", "módulo": "module", "muestra": "show display", "nombre": "name",
    "número": "number", "obten": "get obtain", "omit": "skip exclude", "opción": "option",
    "orden": "order sort", "paquete": "package bundle", "parámetro": "parameter params",
    "permanente": "permanent permalink", "permiso": "permission", "petici": "request",
    "pregunta": "question", "proces": "process", "proveedor": "provider", "prueba": "test tests",
    "puerto": "port", "registr": "log register", "rama": "branch", "redirecci": "redirect",
    "reintent": "retry", "repositorio": "repository repo", "respuesta": "response answer",
    "ruta": "path route", "salida": "output", "señal": "signal", "servidor": "server",
    "sesión": "session", "símbolo": "symbol", "sincroniz": "sync", "solicitud": "request",
    "subida": "upload", "tamaño": "size", "tarea": "task", "tiempo": "time timeout",
    "tipo": "type", "token": "token", "transmit": "stream", "transporte": "transport",
    "usuario": "user", "valida": "validate", "valor": "value", "variable": "variable",
    "vector": "vector vectors", "verific": "verify check", "versión": "version",
}  # fmt: skip
_WORD = re.compile(r"[a-záéíóúüñ]+")
_STEMS = sorted(_ES_EN, key=len, reverse=True)


def english_terms(question: str) -> list[str]:
    """English terms for the Spanish software words of a question (empty for English text)."""
    out: list[str] = []
    for w in _WORD.findall(question.lower()):
        if len(w) < 4:
            continue
        for stem in _STEMS:
            if w.startswith(stem) and (len(stem) >= 5 or w == stem or len(w) - len(stem) <= 3):
                out.extend(_ES_EN[stem].split())
                break
    return list(dict.fromkeys(out))
