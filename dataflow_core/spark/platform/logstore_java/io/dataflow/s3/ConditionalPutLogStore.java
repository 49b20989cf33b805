package io.dataflow.s3;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.ByteArrayOutputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Iterator;
import java.util.UUID;
import org.apache.hadoop.fs.FSDataInputStream;
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
 *
 * <p>"Taken" is the HTTP status 412 of the store's answer (an AWS SDK exception's
 * {@code statusCode()} in the cause chain), never text in a message, which may name a log file
 * {@code ...0412.json}. A 412 on an object that holds our own bytes is our commit: the SDK
 * retried a PUT whose first attempt landed (its answer lost), as the hard-link store's link
 * count tells a retried link of its own. A store that ignores {@code If-None-Match} answers
 * both drivers 200; {@link #probe} finds that out once a session, before any commit.
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
    byte[] content = linesOf(actions);
    if (overwrite) {  // _last_checkpoint and the like: last writer wins, as on any store
      try (FSDataOutputStream out = fs.create(path, true)) {
        out.write(content);
      }
      return;
    }
    try {
      createIfAbsent(fs, path, content);
    } catch (IOException e) {
      if (!versionTaken(e)) {
        throw e;
      }
      if (holds(fs, path, content)) {
        return;  // our PUT landed and its retry was refused: the commit is ours
      }
      java.nio.file.FileAlreadyExistsException taken =
          new java.nio.file.FileAlreadyExistsException(path.toString());
      taken.initCause(e);
      throw taken;
    }
  }

  /** One PUT with {@code If-None-Match: *}: the object is created, or the store refuses (412). */
  private static void createIfAbsent(FileSystem fs, Path path, byte[] content) throws IOException {
    FSDataOutputStream out = (FSDataOutputStream) fs.createFile(path)
        .overwrite(false)
        .must(Options.CreateFileOptionKeys.FS_OPTION_CREATE_CONDITIONAL_OVERWRITE, true)
        .opt(PERFORMANCE, true)
        .build();
    try {
      out.write(content);
    } finally {
      out.close();  // the PUT, and so the 412, happen here
    }
  }

  /** Whether the object at {@code path} holds exactly {@code content}. */
  private static boolean holds(FileSystem fs, Path path, byte[] content) throws IOException {
    try (FSDataInputStream in = fs.open(path)) {
      return Arrays.equals(in.readNBytes(content.length + 1), content);
    } catch (FileNotFoundException e) {
      return false;
    }
  }

  /**
   * True when the store refused the PUT because the object exists: status 412 or the error code
   * PreconditionFailed of the store's answer (or S3A found the object), never a message's text.
   */
  public static boolean versionTaken(Throwable error) {
    for (Throwable t = error; t != null; t = t.getCause()) {
      if (t instanceof java.nio.file.FileAlreadyExistsException
          || t instanceof org.apache.hadoop.fs.FileAlreadyExistsException
          || statusCode(t) == 412
          || "PreconditionFailed".equals(errorCode(t))) {
        return true;
      }
      if (t.getCause() == t) {
        break;
      }
    }
    return false;
  }

  /**
   * The HTTP status an AWS SDK exception (or S3A's wrapper of one) carries, else -1. By
   * reflection: the jar is compiled and loaded without the SDK, which local sessions lack.
   */
  static int statusCode(Throwable t) {
    try {
      Method status = t.getClass().getMethod("statusCode");
      Object code = status.getReturnType() == int.class ? status.invoke(t) : null;
      return code instanceof Integer ? (Integer) code : -1;
    } catch (ReflectiveOperationException | RuntimeException e) {
      return -1;
    }
  }

  /** The S3 error code of an AWS SDK exception ({@code awsErrorDetails().errorCode()}), else null. */
  static String errorCode(Throwable t) {
    try {
      Object details = t.getClass().getMethod("awsErrorDetails").invoke(t);
      Object code = details == null ? null : details.getClass().getMethod("errorCode").invoke(details);
      return code instanceof String ? (String) code : null;
    } catch (ReflectiveOperationException | RuntimeException e) {
      return null;
    }
  }

  /**
   * Whether the store under {@code root} refuses a second conditional create of one object,
   * as commits need: null when it does (412), else what it did instead. Two creates of
   * {@code root/_dataflow_probe/<uuid>} through the commits' own path, then the object is
   * deleted. A first create that fails (no such bucket, no credentials) throws, as a commit would.
   */
  public static String probe(String root, Configuration hadoopConf) throws IOException {
    Path probe = new Path(root + "/_dataflow_probe/" + UUID.randomUUID());
    FileSystem fs = probe.getFileSystem(hadoopConf);
    try {
      createIfAbsent(fs, probe, "first\n".getBytes(StandardCharsets.UTF_8));  // fails as any write would
      try {
        createIfAbsent(fs, probe, "second\n".getBytes(StandardCharsets.UTF_8));
      } catch (IOException e) {
        return versionTaken(e) ? null
            : "a second conditional create of " + probe + " failed with " + oneLine(e) + " instead of 412";
      }
      return "a second conditional create (If-None-Match: *) of " + probe
          + " succeeded (the store ignores the header: it should answer 412 Precondition Failed)";
    } finally {
      try {
        fs.delete(probe, false);
      } catch (IOException e) {
        // a leftover probe object harms nothing
      }
    }
  }

  private static String oneLine(Throwable e) {
    return (e.getClass().getSimpleName() + ": " + e.getMessage()).replaceAll("\\s+", " ");
  }

  private static byte[] linesOf(Iterator<String> actions) throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    while (actions.hasNext()) {
      out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
    }
    return out.toByteArray();
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    return false;  // one PUT: the object appears whole or not at all
  }
}
