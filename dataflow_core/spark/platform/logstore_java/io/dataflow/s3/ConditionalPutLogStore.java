package io.dataflow.s3;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Options;
import org.apache.hadoop.fs.Path;

/**
 * Delta's log store for S3 with many drivers: each new log file (N.json) is one PUT with
 * {@code If-None-Match: *}, so of two drivers committing version N at once the store keeps one
 * and answers the other 412 Precondition Failed, which becomes
 * {@link java.nio.file.FileAlreadyExistsException}: Delta's signal that the version is taken,
 * upon which it checks for conflicts and retries at N+1.
 *
 * <p>Why: Delta's S3SingleDriverLogStore checks that N.json is absent and then writes it
 * unconditionally, with a lock that lives in one JVM. Two drivers both pass the check, both
 * write, the second PUT replaces the first, and both report success: one commit is lost.
 *
 * <p>The conditional PUT goes through Hadoop 3.5's S3A: {@code createFile} with
 * {@code fs.option.create.conditional.overwrite} as a must, and
 * {@code fs.s3a.create.performance} so that S3A skips its HEAD/LIST probes (the condition
 * makes them redundant). A store that does not honour the condition would lose commits again;
 * S3A refuses the must when {@code fs.s3a.create.conditional.enabled} is off, and this class
 * then fails the commit rather than write unsafely. Reads and listings are Hadoop's.
 */
public class ConditionalPutLogStore extends HadoopFileSystemLogStore {

  private static final String PERFORMANCE = "fs.s3a.create.performance";

  public ConditionalPutLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    if (overwrite) {  // _last_checkpoint and the like: last writer wins, as on any store
      try (FSDataOutputStream out = fs.create(path, true)) {
        writeLines(out, actions);
      }
      return;
    }
    try {
      FSDataOutputStream out = (FSDataOutputStream) fs.createFile(path)
          .overwrite(false)
          .must(Options.CreateFileOptionKeys.FS_OPTION_CREATE_CONDITIONAL_OVERWRITE, true)
          .opt(PERFORMANCE, true)
          .build();
      try {
        writeLines(out, actions);
      } finally {
        out.close();  // the PUT, and so the 412, happen here
      }
    } catch (IOException e) {
      if (versionTaken(e)) {
        java.nio.file.FileAlreadyExistsException taken =
            new java.nio.file.FileAlreadyExistsException(path.toString());
        taken.initCause(e);
        throw taken;
      }
      throw e;
    }
  }

  /** True when the store refused the PUT because the object exists (412), or S3A found it. */
  static boolean versionTaken(Throwable error) {
    for (Throwable t = error; t != null; t = t.getCause()) {
      if (t instanceof java.nio.file.FileAlreadyExistsException
          || t instanceof org.apache.hadoop.fs.FileAlreadyExistsException) {
        return true;
      }
      String name = t.getClass().getName();
      String message = String.valueOf(t.getMessage());
      if (name.endsWith(".RemoteFileChangedException")
          || message.contains("412")
          || message.contains("PreconditionFailed")) {
        return true;
      }
      if (t.getCause() == t) {
        break;
      }
    }
    return false;
  }

  private static void writeLines(OutputStream out, Iterator<String> actions) throws IOException {
    while (actions.hasNext()) {
      out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
    }
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    return false;  // one PUT: the object appears whole or not at all
  }
}
