package dev.onceflow.reference;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Several runs of one Kafka tool's main class in one JVM (issue 10): starting the JVM is most of
 * a short tool's run, and a test that asks a tool four questions need not pay for it four times.
 * Each run is the tool's own {@code main} with its own arguments, as its script would call it.
 *
 * <pre>
 *   ToolRuns MAIN_CLASS -- ARGS... [-- ARGS...]...   each "--" starts a run's arguments
 * </pre>
 *
 * Prints one JSON list on stdout, a {"stdout", "stderr"} object per run with what the run wrote
 * (an exception out of {@code main} goes to that run's stderr), and exits 0.  A tool that exits
 * the JVM itself (a usage error) ends the batch with its status and nothing is printed.  Log lines
 * go to the real stderr (the logging configuration holds it from the start).
 */
public final class ToolRuns {
    public static void main(String[] args) throws Exception {
        Method main = Class.forName(args[0]).getMethod("main", String[].class);
        List<List<String>> runs = new ArrayList<>();
        for (int i = 1; i < args.length; i++) {
            if (args[i].equals("--")) {
                runs.add(new ArrayList<>());
            } else if (runs.isEmpty()) {
                System.err.println("usage: ToolRuns MAIN_CLASS -- ARGS... [-- ARGS...]...");
                System.exit(2);
            } else {
                runs.get(runs.size() - 1).add(args[i]);
            }
        }
        PrintStream out = System.out;
        PrintStream err = System.err;
        List<Object> results = new ArrayList<>();
        for (List<String> run : runs) {
            ByteArrayOutputStream runOut = new ByteArrayOutputStream();
            ByteArrayOutputStream runErr = new ByteArrayOutputStream();
            System.setOut(new PrintStream(runOut, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(runErr, true, StandardCharsets.UTF_8));
            try {
                main.invoke(null, (Object) run.toArray(new String[0]));
            } catch (InvocationTargetException e) {
                e.getCause().printStackTrace();
            } finally {
                System.out.flush();
                System.err.flush();
                System.setOut(out);
                System.setErr(err);
            }
            Map<String, Object> result = new LinkedHashMap<>();
            result.put("stdout", runOut.toString(StandardCharsets.UTF_8));
            result.put("stderr", runErr.toString(StandardCharsets.UTF_8));
            results.add(result);
        }
        out.println(ClientCheck.Json.write(results));
        System.exit(0);  // the tools' client threads must not keep the JVM alive
    }

    private ToolRuns() {
    }
}
